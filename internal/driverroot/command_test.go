package driverroot_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/internal/driverroot"
)

func TestFindBinary(t *testing.T) {
	root := t.TempDir()
	layout(t, root, []string{"usr/sbin/nvidia-imex", "bin/nvidia-imex-ctl"}, map[string]string{
		// An absolute link, which only a lookup inside the root follows.
		"usr/bin/nvidia-imex-ctl": "/bin/nvidia-imex-ctl",
	})
	for _, tc := range []struct{ name, want string }{
		{name: "nvidia-imex", want: filepath.Join(root, "usr/sbin/nvidia-imex")},
		{name: "nvidia-imex-ctl", want: filepath.Join(root, "bin/nvidia-imex-ctl")},
		{name: "missing", want: filepath.Join(root, "usr/bin/missing")},
	} {
		if got := driverroot.FindBinary(root, tc.name); got != tc.want {
			t.Errorf("FindBinary(%s) = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestCommand(t *testing.T) {
	t.Setenv("LD_LIBRARY_PATH", "/plugin-libs")
	t.Setenv("LD_PRELOAD", "/plugin-libs/preload.so")
	ctx := context.Background()

	t.Run("host root runs the program itself", func(t *testing.T) {
		cmd, err := driverroot.Command(ctx, "/", "/usr/bin/nvidia-imex", []string{"EXTRA=1"}, "-c", "cfg")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"/usr/bin/nvidia-imex", "-c", "cfg"}, cmd.Args); diff != "" {
			t.Errorf("args (-want +got):\n%s", diff)
		}
		if env := strings.Join(cmd.Env, "\n"); !strings.Contains(env, "LD_LIBRARY_PATH=/plugin-libs") || !strings.HasSuffix(env, "EXTRA=1") {
			t.Errorf("host root: environment %q must be this process's plus EXTRA=1", env)
		}
	})

	t.Run("other root runs its loader", func(t *testing.T) {
		root := t.TempDir()
		layout(t, root, []string{"usr/lib64/ld-linux-x86-64.so.2", "usr/bin/nvidia-imex"}, map[string]string{"lib64": "usr/lib64"})
		bin := filepath.Join(root, "usr/bin/nvidia-imex")
		cmd, err := driverroot.Command(ctx, root, bin, []string{"EXTRA=1"}, "-c", "cfg")
		if err != nil {
			t.Fatal(err)
		}
		loader := filepath.Join(root, "usr/lib64/ld-linux-x86-64.so.2")
		want := []string{loader, "--library-path", filepath.Join(root, "usr/lib64"), bin, "-c", "cfg"}
		if diff := cmp.Diff(want, cmd.Args); diff != "" {
			t.Errorf("args (-want +got):\n%s", diff)
		}
		for _, kv := range cmd.Env {
			if strings.HasPrefix(kv, "LD_") {
				t.Errorf("environment holds %s", kv)
			}
		}
		if got := cmd.Env[len(cmd.Env)-1]; got != "EXTRA=1" {
			t.Errorf("last environment entry = %q, want EXTRA=1", got)
		}
		if got, want := driverroot.CommandLine(cmd, bin, []string{"-c", "cfg"}), bin+" -c cfg (run by "+loader+")"; got != want {
			t.Errorf("CommandLine = %q, want %q", got, want)
		}
	})

	t.Run("other root without a loader", func(t *testing.T) {
		root := t.TempDir()
		_, err := driverroot.Command(ctx, root, filepath.Join(root, "usr/bin/nvidia-imex"), nil)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "driver root "+root) {
			t.Errorf("Command without a loader = %v, want fs.ErrNotExist naming the root", err)
		}
	})
}
