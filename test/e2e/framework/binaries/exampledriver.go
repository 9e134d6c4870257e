package binaries

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

// The upstream example driver the benchmarks compare against: its kubelet plugin, built from
// the Go module proxy at the version pinned by a nested module of its own, so that it keeps the
// dependencies it was released with.
const (
	// ExampleDriverModuleDir is that nested module, relative to test/e2e.
	ExampleDriverModuleDir = "tools/dra-example-driver"
	exampleDriverModule    = "sigs.k8s.io/dra-example-driver"
	exampleDriverPackage   = exampleDriverModule + "/cmd/dra-example-kubeletplugin"
	// ExampleDriver is the binary's file name.
	ExampleDriver = "dra-example-kubeletplugin"
)

// ExampleDriverPath returns the cached dra-example-kubeletplugin of the pinned version,
// building it first when it is missing (or always with rebuild). Its cache directory is a
// sibling of the Kubernetes binaries', keyed by the example driver's version.
func (s *Set) ExampleDriverPath(ctx context.Context, out io.Writer, rebuild bool) (string, error) {
	modDir := filepath.Join(s.ModuleDir, ExampleDriverModuleDir)
	versions, err := moduleVersions(ctx, modDir, exampleDriverModule)
	if err != nil {
		return "", err
	}
	v := versions[exampleDriverModule]
	dir := filepath.Join(filepath.Dir(s.Dir), "dra-example-driver-"+v)
	path := filepath.Join(dir, ExampleDriver)
	if !rebuild && runsHelp(ctx, path) {
		fmt.Fprintf(out, "  %-24s cached (%s)\n", ExampleDriver, v)
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the example driver's cache: %w", err)
	}
	start := time.Now()
	fmt.Fprintf(out, "  %-24s building %s@%s ...\n", ExampleDriver, exampleDriverPackage, v)
	tmp := path + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-o", tmp, "-ldflags", "-s -w", exampleDriverPackage)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	stopBeat := heartbeat(out, ExampleDriver)
	err = cmd.Run()
	stopBeat()
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("go build %s (in %s): %w\n%s", exampleDriverPackage, modDir, err, stderr.String())
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("install %s: %w", ExampleDriver, err)
	}
	if !runsHelp(ctx, path) {
		return "", fmt.Errorf("%s built, but `%s --help` fails", path, ExampleDriver)
	}
	fmt.Fprintf(out, "  %-24s built in %s\n", ExampleDriver, time.Since(start).Round(time.Second))
	return path, nil
}

// runsHelp reports whether the example driver at path runs and names itself in its help (it
// has no --version flag).
func runsHelp(ctx context.Context, path string) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := exec.CommandContext(ctx, path, "--help").CombinedOutput()
	return err == nil && strings.Contains(string(got), ExampleDriver)
}
