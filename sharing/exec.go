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
)

// DriverRootDir is where the NVIDIA driver's files are on the host filesystem as this process
// sees it: "/" on a host install, /run/nvidia/driver (or wherever it is mounted) with the GPU
// Operator's driver container.
type DriverRootDir string

// Path returns p inside the driver root.
func (r DriverRootDir) Path(p string) string {
	if r == "" {
		r = "/"
	}
	return filepath.Join(string(r), p)
}

// env returns the environment for a driver binary: the process environment, extra, and, for
// a driver root other than "/", LD_LIBRARY_PATH pointing into it so the binary finds the
// driver's libraries.
func (r DriverRootDir) env(extra ...string) []string {
	env := append(os.Environ(), extra...)
	if r != "" && r != "/" {
		var dirs []string
		for _, d := range []string{"usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib", "lib64", "lib"} {
			dirs = append(dirs, r.Path(d))
		}
		env = append(env, "LD_LIBRARY_PATH="+strings.Join(dirs, ":"))
	}
	return env
}

// findBinary returns the first existing path of name under the driver root's usual binary
// directories, or the /usr/bin path when none exists (the error then comes from exec).
func (r DriverRootDir) findBinary(name string) string {
	for _, d := range []string{"usr/bin", "usr/sbin", "bin", "sbin"} {
		p := r.Path(filepath.Join(d, name))
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return r.Path(filepath.Join("usr/bin", name))
}

// waitDelay bounds how long a finished command's I/O may keep Wait waiting: a process that a
// command leaves behind (a daemon) may hold its standard streams open for its whole life.
const waitDelay = 2 * time.Second

// run runs a short-lived driver command and returns an error with its combined output.
func run(ctx context.Context, bin string, env []string, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// startDaemon runs a command that forks a daemon and exits (nvidia-cuda-mps-control -d). The
// daemon inherits the command's stdout and stderr, so they go to logFile, a regular file,
// rather than to a pipe: Wait then returns when the command exits, and the daemon never writes
// into a pipe whose reader is gone (SIGPIPE).
func startDaemon(ctx context.Context, bin string, env []string, logFile string, args ...string) error {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s %s: output file: %w", bin, strings.Join(args, " "), err)
	}
	defer func() { _ = f.Close() }()
	start, _ := f.Seek(0, io.SeekEnd)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, tail(logFile, start))
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
