package input_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/internal/input"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(small, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path string
		limit      int64
		want       string
		err        string
	}{
		{"small", small, 1 << 10, "hello", ""},
		{"exactly the limit", small, 5, "hello", ""},
		{"one over", small, 4, "", small + ": larger than the 4 bytes limit for this input"},
		{"big", big, 1 << 20, "", big + ": larger than the 1 MiB limit for this input"},
		{"dev zero", "/dev/zero", 16 << 20, "", "/dev/zero: larger than the 16 MiB limit for this input"},
		{"missing", filepath.Join(dir, "missing"), 10, "", "no such file or directory"},
		{"directory", dir, 10, "", "is a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, err := input.ReadFile(context.Background(), c.path, c.limit)
			got := errString(err)
			if c.err == "" && err != nil || c.err != "" && !strings.Contains(got, c.err) {
				t.Fatalf("error %q, want one containing %q", got, c.err)
			}
			if diff := cmp.Diff(c.want, string(data)); diff != "" {
				t.Errorf("data (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadFileHonoursContext: a FIFO without a writer blocks open(2) forever; the read returns
// once the context is done.
func TestReadFileHonoursContext(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("interrupted")
	time.AfterFunc(100*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	_, err := input.ReadFile(ctx, fifo, 1<<10)
	if !errors.Is(err, cause) {
		t.Errorf("error %v, want the context's cause", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned after %v", d)
	}
}

func TestText(t *testing.T) {
	cases := []struct {
		name string
		data string
		err  string
	}{
		{"yaml", "a: b\n", ""},
		{"nul", "a: b\x00", "f: binary data (a NUL byte at offset 4), not YAML or JSON"},
		{"latin1", "a: \xe9t\xe9", "f: not UTF-8 text (an invalid byte at offset 3), not YAML or JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.err, errString(input.Text("f", []byte(c.data)))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnmarshalStrict(t *testing.T) {
	type T struct {
		BlockedMIGProfiles []string `json:"blockedMIGProfiles"`
	}
	cases := []struct {
		name, data, err string
	}{
		{"ok", "blockedMIGProfiles: [a]", ""},
		{"json", `{"blockedMIGProfiles": ["a"]}`, ""},
		{"other case", "blockedMigProfiles: [a]", `unknown field "blockedMigProfiles"`},
		{"unknown", "blocked: [a]", `unknown field "blocked"`},
		{"duplicate", "blockedMIGProfiles: [a]\nblockedMIGProfiles: [b]", `key "blockedMIGProfiles" already set`},
		{"wrong type", "blockedMIGProfiles: 3", "cannot unmarshal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v T
			got := errString(input.UnmarshalStrict([]byte(c.data), &v))
			if c.err == "" && got != "" || !strings.Contains(got, c.err) {
				t.Errorf("error %q, want one containing %q", got, c.err)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
