package sharing

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpudra/gpudra/internal/driverroot"
)

// DriverRootDir is where the NVIDIA driver's files are on the host filesystem as this process
// sees it: "/" on a host install, /run/nvidia/driver (or wherever it is mounted) with the GPU
// Operator's driver container.
//
// Driver binaries (nvidia-smi, nvidia-cuda-mps-control) of a root other than "/" run with that
// root's own dynamic loader and library directories (`<root>/lib64/ld-linux-x86-64.so.2
// --library-path <root's library dirs> <binary> ARGS`), never with LD_LIBRARY_PATH: the root's
// C library may belong to another glibc than this process's loader. Symbolic links in the root
// are resolved inside it. A root without a loader (lib64/ld-linux-x86-64.so.2,
// lib/x86_64-linux-gnu/ld-linux-x86-64.so.2, usr/lib64/ld-linux-x86-64.so.2,
// lib/ld-linux-aarch64.so.1 or lib/aarch64-linux-gnu/ld-linux-aarch64.so.1) cannot run them.
type DriverRootDir string

// Path returns p inside the driver root.
func (r DriverRootDir) Path(p string) string {
	if r == "" {
		r = "/"
	}
	return filepath.Join(string(r), p)
}

// findBinary returns the first existing path of name under the driver root's usual binary
// directories, with symbolic links resolved inside the root, or the /usr/bin path when none
// exists (the error then comes from exec).
func (r DriverRootDir) findBinary(name string) string {
	return driverroot.FindBinary(string(r), name)
}

// command returns the command that runs the driver binary bin with args and the process
// environment plus extraEnv: bin itself for the root "/", the root's own dynamic loader for any
// other root, without LD_LIBRARY_PATH or LD_PRELOAD (driverroot.Command says how and why).
func (r DriverRootDir) command(ctx context.Context, bin string, extraEnv []string, args ...string) (*exec.Cmd, error) {
	return driverroot.Command(ctx, string(r), bin, extraEnv, args...)
}

// commandLine names a command in errors: the binary and its arguments, and the loader that
// runs it when that is not the binary itself.
func commandLine(cmd *exec.Cmd, bin string, args []string) string {
	return driverroot.CommandLine(cmd, bin, args)
}

// waitDelay bounds how long a finished command's I/O may keep Wait waiting: a process that a
// command leaves behind (a daemon) may hold its standard streams open for its whole life.
const waitDelay = 2 * time.Second

// run runs a short-lived driver command (see command) and returns an error with its combined
// output.
func (r DriverRootDir) run(ctx context.Context, bin string, extraEnv []string, stdin string, args ...string) error {
	cmd, err := r.command(ctx, bin, extraEnv, args...)
	if err != nil {
		return err
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", commandLine(cmd, bin, args), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// startDaemon runs a command that forks a daemon and exits (nvidia-cuda-mps-control -d). The
// daemon inherits the command's stdout and stderr, so they go to logFile, a regular file,
// rather than to a pipe: Wait then returns when the command exits, and the daemon never writes
// into a pipe whose reader is gone (SIGPIPE).
func (r DriverRootDir) startDaemon(ctx context.Context, bin string, extraEnv []string, logFile string, args ...string) error {
	cmd, err := r.command(ctx, bin, extraEnv, args...)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: output file: %w", commandLine(cmd, bin, args), err)
	}
	defer func() { _ = f.Close() }()
	start, _ := f.Seek(0, io.SeekEnd)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", commandLine(cmd, bin, args), err, tail(logFile, start))
	}
	return nil
}

// tail returns what was written to path from offset on, at most 4 KiB of it, trimmed.
func tail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 4<<10))
	return strings.TrimSpace(string(b))
}

// Command returns the command that runs the driver binary bin of this root with args and the
// process environment plus extraEnv: bin itself for the root "/", the root's own dynamic loader
// for any other root (see DriverRootDir). An MPS daemon pod runs nvidia-cuda-mps-control -f
// through it.
func (r DriverRootDir) Command(ctx context.Context, bin string, extraEnv []string, args ...string) (*exec.Cmd, error) {
	return r.command(ctx, bin, extraEnv, args...)
}

// FindBinary returns the path of the driver binary name (nvidia-cuda-mps-control) under the
// root's usual binary directories, with symbolic links resolved inside the root, or its /usr/bin
// path when none exists (the error then comes from running it).
func (r DriverRootDir) FindBinary(name string) string { return r.findBinary(name) }
