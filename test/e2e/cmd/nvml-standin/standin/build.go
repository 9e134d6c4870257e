// Package standin builds the node tier's stand-in NVML library (issue 27): a C shared library,
// libnvidia-ml.so.1, that exports every function nvml.h declares and answers the ones gpudra
// calls from a machine described in a state file beside it (nvml-standin.state), written here
// from a gpu/gputest machine. Loaded by the reference driver with --nvml=real from a fake
// driver root, it lets the node tier run the production NVML path: dlopen from the driver
// root, go-nvml's cgo calls, enumeration, MIG creation and destruction, health events.
//
// The library is C, not a Go c-shared library: a second Go runtime loaded into a Go program is
// not supported. Functions nvml.h declares and the stand-in does not model are generated stubs
// answering NVML_ERROR_NOT_SUPPORTED (Stubs), so a call the project starts making one day
// degrades to "not supported" instead of killing the process with a symbol lookup error.
//
// MIG changes are written back to the state file under an exclusive lock on
// "nvml-standin.state.lock" (by rename), so they survive the plugin's restarts and ReadState
// can follow them from another process. Where the library's directory is read-only (the chart
// mounts the driver root so), the state file beside it may be a symbolic link: the library
// follows it and keeps the state, its lock and temporary files in the link target's directory.
package standin

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// LibraryName is the file name Build writes: the name gpudra (and go-nvml) load NVML by.
const LibraryName = "libnvidia-ml.so.1"

// StateName is the file name of the state the library reads, in the library's directory.
const StateName = "nvml-standin.state"

// NVMLModule is the Go module whose nvml.h the library is compiled against: the bindings
// gpudra calls the library through.
const NVMLModule = "github.com/NVIDIA/go-nvml"

//go:embed csrc
var csrc embed.FS

// HeaderDir returns the directory holding go-nvml's nvml.h, as `go list -m` resolves the module
// from dir (a directory inside a module that requires it; "" is the current directory).
func HeaderDir(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", NVMLModule)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate %s: go list -m: %w: %s", NVMLModule, err, strings.TrimSpace(stderr.String()))
	}
	hdr := filepath.Join(strings.TrimSpace(string(out)), "pkg", "nvml")
	if _, err := os.Stat(filepath.Join(hdr, "nvml.h")); err != nil {
		return "", fmt.Errorf("locate nvml.h of %s: %w (is the module downloaded? go mod download)", NVMLModule, err)
	}
	return hdr, nil
}

// Build compiles the stand-in library into outDir/LibraryName with gcc (or $CC), against the
// nvml.h in headerDir (HeaderDir). The generated stubs and the sources are written to a
// temporary directory that Build removes.
func Build(ctx context.Context, headerDir, outDir string) (string, error) {
	header, err := os.ReadFile(filepath.Join(headerDir, "nvml.h"))
	if err != nil {
		return "", fmt.Errorf("stand-in NVML: %w", err)
	}
	stubs, err := Stubs(header)
	if err != nil {
		return "", fmt.Errorf("stand-in NVML: stubs from %s: %w", headerDir, err)
	}
	src, err := os.MkdirTemp("", "nvml-standin-src")
	if err != nil {
		return "", fmt.Errorf("stand-in NVML: %w", err)
	}
	defer os.RemoveAll(src)
	if err := writeSources(src, stubs); err != nil {
		return "", fmt.Errorf("stand-in NVML: %w", err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("stand-in NVML: %w", err)
	}
	out := filepath.Join(outDir, LibraryName)
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	cmd := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-Wno-deprecated-declarations",
		"-DNVML_NO_UNVERSIONED_FUNC_DEFS=1", "-I", headerDir, "-I", src,
		"-Wl,-soname,"+LibraryName, "-o", out,
		filepath.Join(src, "standin.c"), filepath.Join(src, "stubs.c"), "-lpthread", "-ldl")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("stand-in NVML: %s: %w\n%s", strings.Join(cmd.Args, " "), err, msg)
	}
	return out, nil
}

// writeSources writes the embedded C sources and the generated stubs into dir.
func writeSources(dir string, stubs []byte) error {
	entries, err := csrc.ReadDir("csrc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		data, err := csrc.ReadFile("csrc/" + e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "stubs.c"), stubs, 0o644)
}
