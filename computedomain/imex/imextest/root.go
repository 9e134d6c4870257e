package imextest

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// FakePackage is the import path of the fake's main package.
const FakePackage = "github.com/gpudra/gpudra/computedomain/imex/imextest/fakeimex"

// NewDriverRoot returns a new driver root (a directory under tb.TempDir()) that holds the fake
// as usr/bin/nvidia-imex and (a hard link) usr/bin/nvidia-imex-ctl, and a copy of this host's
// dynamic loader, so that the root's programs run through the root's own loader, as a real
// driver root's do (internal/driverroot.Command). The fake is built with the go command as a
// position-independent executable that needs no C library. The test is skipped without a go
// command or a glibc loader on this host (amd64 and arm64 only).
func NewDriverRoot(tb testing.TB) string {
	tb.Helper()
	var loader string
	switch runtime.GOARCH {
	case "amd64":
		loader = "lib64/ld-linux-x86-64.so.2"
	case "arm64":
		loader = "lib/ld-linux-aarch64.so.1"
	default:
		tb.Skipf("no driver root for %s", runtime.GOARCH)
	}
	hostLoader, err := filepath.EvalSymlinks("/" + loader)
	if err != nil {
		tb.Skipf("no glibc dynamic loader on this host: %v", err)
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go command to build the fake nvidia-imex")
	}
	root := tb.TempDir()
	for _, d := range []string{"usr/bin", filepath.Dir(loader)} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	bin := filepath.Join(root, "usr/bin/nvidia-imex")
	cmd := exec.Command(gocmd, "build", "-buildmode=pie", "-o", bin, FakePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building the fake nvidia-imex: %v\n%s", err, out)
	}
	// A second name for the same file, not a symbolic link: FindBinary resolves links, and the
	// fake picks its role by the name it was started as.
	if err := os.Link(bin, filepath.Join(root, "usr/bin/nvidia-imex-ctl")); err != nil {
		tb.Fatal(err)
	}
	copyFile(tb, hostLoader, filepath.Join(root, loader))
	return root
}

// copyFile copies from to to, executable.
func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	in, err := os.Open(from)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
}
