package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cliEnv makes the test binary run as gpu-dra-driver (TestMain), so that hack/gpu-check can be
// tested without building the driver; cliLogEnv names a file each such run appends its
// arguments to.
const (
	cliEnv    = "GPU_DRA_DRIVER_TEST_AS_CLI"
	cliLogEnv = "GPU_DRA_DRIVER_TEST_CLI_LOG"
)

// logCLIRun appends the command line of a run as gpu-dra-driver to the file cliLogEnv names
// (TestMain calls it).
func logCLIRun() {
	log := os.Getenv(cliLogEnv)
	if log == "" {
		return
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		_, _ = f.WriteString(strings.Join(os.Args[1:], " ") + "\n")
		_ = f.Close()
	}
}

// TestGPUCheckScript runs hack/gpu-check: with no NVIDIA driver under the driver root it exits 3
// saying so, before building or running anything; on a fake machine (GPU_CHECK_MACHINE) it runs
// the read-only commands only — never serve or demo — and reports what they said.
func TestGPUCheckScript(t *testing.T) {
	script, err := filepath.Abs("../../hack/gpu-check")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		args     []string
		env      []string // beside GPU_CHECK_BIN, GPU_CHECK_OUT and the CLI log
		code     int
		stdout   []string
		stderr   []string
		commands []string // the driver's command lines, in order; nil for none
	}{
		{name: "no driver", env: []string{"DRIVER_ROOT=" + t.TempDir()}, code: 3,
			stderr: []string{"gpu-check: ", "nothing was run"}},
		{name: "usage", args: []string{"--gpu"}, code: 2, stderr: []string{"unexpected argument --gpu", "Usage: hack/gpu-check"}},
		{name: "help", args: []string{"-h"}, code: 0, stdout: []string{"never resets a GPU", "Exit status"}},
		{name: "fake A30 machine", env: []string{"GPU_CHECK_MACHINE=a30x4"}, code: 0,
			stdout: []string{
				"GPUs:          4 (", "products: NVIDIA A30",
				"MIG:           1 MIG-capable products, 0 MIG devices; 0 GPUs failed to enumerate",
				"render:        1 ResourceSlices, 4 devices",
				"MIG geometry vs the built-in catalog (0 differences):",
				"  NVIDIA A30 (GPU 0, 1, 2, 3): MIG geometry read from the GPU: 4 memory slices, 4 compute slices, 5 GPU-instance profiles; the catalog agrees",
				"ok      mig-profiles-NVIDIA-A30: gpu-dra-driver mig profiles --gpu NVIDIA A30",
				"gpu-check: ok (read-only",
			},
			commands: []string{
				"inventory -o json --machine a30x4", "inventory --machine a30x4", "render --machine a30x4",
				"render --dynamic-mig --machine a30x4", "topo --machine a30x4", "inventory --mig-geometry --machine a30x4",
				"mig profiles --gpu NVIDIA A30",
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out, log := filepath.Join(dir, "out"), filepath.Join(dir, "cli.log")
			cmd := exec.Command("bash", append([]string{script}, tc.args...)...)
			cmd.Env = append(os.Environ(), cliEnv+"=1", cliLogEnv+"="+log, "GPU_CHECK_BIN="+self, "GPU_CHECK_OUT="+out)
			cmd.Env = append(cmd.Env, tc.env...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := 0
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatal(err)
				}
				code = ee.ExitCode()
			}
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			var commands []string
			if b, err := os.ReadFile(log); err == nil {
				commands = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			}
			if diff := cmp.Diff(tc.commands, commands); diff != "" {
				t.Errorf("driver commands run (-want +got):\n%s", diff)
			}
			if tc.commands == nil {
				if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("output directory %s was made (%v): nothing may run", out, err)
				}
			}
		})
	}
}
