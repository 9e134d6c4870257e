package sharing

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DriverRoot is where the NVIDIA driver's files are on the host filesystem as this process
// sees it: "/" on a host install, /run/nvidia/driver (or wherever it is mounted) with the GPU
// Operator's driver container.
type DriverRoot string

// Path returns p inside the driver root.
func (r DriverRoot) Path(p string) string {
	if r == "" {
		r = "/"
	}
	return filepath.Join(string(r), p)
}

// env returns the environment for a driver binary: the process environment, extra, and, for
// a driver root other than "/", LD_LIBRARY_PATH pointing into it so the binary finds the
// driver's libraries.
func (r DriverRoot) env(extra ...string) []string {
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
func (r DriverRoot) findBinary(name string) string {
	for _, d := range []string{"usr/bin", "usr/sbin", "bin", "sbin"} {
		p := r.Path(filepath.Join(d, name))
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return r.Path(filepath.Join("usr/bin", name))
}

func run(ctx context.Context, bin string, env []string, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
