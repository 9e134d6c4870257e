package input

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Size limits per kind of input. Each is far above what a real input of the kind holds and far
// below what would exhaust a node's memory.
const (
	// ManifestLimit bounds a manifest (check FILE or stdin): 16 MiB, about ten times the largest
	// object etcd stores by default.
	ManifestLimit int64 = 16 << 20
	// SlicesLimit bounds a file of ResourceSlices and DeviceClasses (check --slices): 64 MiB, a
	// large cluster's slices.
	SlicesLimit int64 = 64 << 20
	// ConfigLimit bounds a configuration file (mig-parted config, check --policy): 1 MiB.
	ConfigLimit int64 = 1 << 20
	// OpaqueLimit bounds the opaque parameters of one device configuration in a claim: 10 KiB,
	// the limit resource.k8s.io/v1 validation applies (OpaqueParametersMaxLength).
	OpaqueLimit int64 = 10 << 10
)

// chunk is how much one read asks for; the context is checked between reads.
const chunk = 64 << 10

// TooLargeError is an input beyond its limit.
type TooLargeError struct {
	// Name is the input: a path, or "stdin".
	Name string
	// Limit is the size limit in bytes.
	Limit int64
}

// Error implements error.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: larger than the %s limit for this input", e.Name, FormatSize(e.Limit))
}

// FormatSize writes a byte count as KiB or MiB when it is a whole number of them.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ReadFile reads the file at path, at most limit bytes; a larger file is a *TooLargeError. It
// returns when ctx is done, even while opening or reading blocks (a FIFO without a writer, a
// terminal), with an error that wraps the context's cause.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	return await(ctx, path, func(stop <-chan struct{}) ([]byte, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		go func() { <-stop; _ = f.Close() }() // unblocks a read from a pipe or FIFO
		return readAll(ctx, f, path, limit)
	})
}

// Read reads r to its end, at most limit bytes; name says what r is in errors ("stdin"). Like
// ReadFile it returns when ctx is done; the read that blocks is then abandoned.
func Read(ctx context.Context, r io.Reader, name string, limit int64) ([]byte, error) {
	return await(ctx, name, func(<-chan struct{}) ([]byte, error) { return readAll(ctx, r, name, limit) })
}

// await runs read in a goroutine and returns its result, or an error when ctx is done first.
// stop is closed when await returns.
func await(ctx context.Context, name string, read func(stop <-chan struct{}) ([]byte, error)) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, context.Cause(ctx))
	}
	type result struct {
		data []byte
		err  error
	}
	stop := make(chan struct{})
	defer close(stop)
	done := make(chan result, 1)
	go func() {
		data, err := read(stop)
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("read %s: %w", name, context.Cause(ctx))
	}
}

// readAll reads in chunks, checking ctx and the limit after each.
func readAll(ctx context.Context, r io.Reader, name string, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	p := make([]byte, chunk)
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", name, context.Cause(ctx))
		}
		n, err := r.Read(p)
		buf.Write(p[:n])
		if int64(buf.Len()) > limit {
			return nil, &TooLargeError{Name: name, Limit: limit}
		}
		switch {
		case errors.Is(err, io.EOF):
			return buf.Bytes(), nil
		case err != nil:
			return nil, err
		}
	}
}

// Text checks that data is text a YAML or JSON decoder should see: valid UTF-8 without NUL
// bytes. The error names the input and the offset of the first offending byte.
func Text(name string, data []byte) error {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return fmt.Errorf("%s: binary data (a NUL byte at offset %d), not YAML or JSON", name, i)
	}
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, size := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return fmt.Errorf("%s: not UTF-8 text (an invalid byte at offset %d), not YAML or JSON", name, off)
	}
	return nil
}

// UnmarshalStrict decodes one YAML or JSON document into v: duplicate keys, unknown fields and
// fields spelled in a case other than their JSON name are errors, all of them joined.
func UnmarshalStrict(data []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return oneLine(err)
	}
	strict, err := sigsjson.UnmarshalStrict(js, v)
	if err != nil {
		return err
	}
	if len(strict) == 0 {
		return nil
	}
	msgs := make([]string, len(strict))
	for i, e := range strict {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// oneLine joins the lines of a multi-line error ("yaml: unmarshal errors:\n  line 2: ...") so
// that the first line of a message says what is wrong.
func oneLine(err error) error {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return err
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return errors.New(strings.Join(lines, " "))
}
