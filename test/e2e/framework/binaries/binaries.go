package binaries

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
)

// Module paths whose versions key the cache and stamp the binaries.
const (
	kubernetesModule = "k8s.io/kubernetes"
	etcdModule       = "go.etcd.io/etcd/server/v3"
)

// Names of the binaries a Set provides.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeScheduler         = "kube-scheduler"
	KubeControllerManager = "kube-controller-manager"
)

// Binary is one program of a Set: how to build it and how to recognise a good cached copy.
type Binary struct {
	// Name is the file name in the cache directory.
	Name string
	// Package is the import path given to go build.
	Package string
	// VersionMarker must appear in the output of `<binary> --version`.
	VersionMarker string
	// LDFlags are passed to go build.
	LDFlags []string
}

// Set is the list of binaries for one pinned Kubernetes version and the directory holding them.
type Set struct {
	// Dir is the cache directory of this version.
	Dir string
	// ModuleDir is the directory of test/e2e/go.mod; builds run there.
	ModuleDir string
	// KubernetesVersion is the pinned k8s.io/kubernetes version, e.g. v1.37.2.
	KubernetesVersion string
	// EtcdVersion is the pinned etcd server version, e.g. v3.7.0.
	EtcdVersion string
	// Binaries are built in this order.
	Binaries []Binary
	// Env is added to the environment of go build (GOWORK for a patched Set).
	Env []string
}

// Resolve reads the pinned versions from the module that contains the working directory and
// returns the Set for them. It fails outside test/e2e's module.
func Resolve(ctx context.Context) (*Set, error) {
	modDir, err := moduleDir(ctx)
	if err != nil {
		return nil, err
	}
	versions, err := moduleVersions(ctx, modDir, kubernetesModule, etcdModule)
	if err != nil {
		return nil, err
	}
	root, err := cacheRoot()
	if err != nil {
		return nil, err
	}
	kv, ev := versions[kubernetesModule], versions[etcdModule]
	flags, err := versionLDFlags(kv)
	if err != nil {
		return nil, err
	}
	kubeMarker := "Kubernetes " + kv
	return &Set{
		Dir:               filepath.Join(root, "k8s-"+kv),
		ModuleDir:         modDir,
		KubernetesVersion: kv,
		EtcdVersion:       ev,
		Binaries: []Binary{
			{Name: Etcd, Package: "github.com/gpudra/gpudra/test/e2e/cmd/etcd", VersionMarker: "etcd Version: " + strings.TrimPrefix(ev, "v")},
			{Name: KubeAPIServer, Package: kubernetesModule + "/cmd/kube-apiserver", VersionMarker: kubeMarker, LDFlags: flags},
			{Name: KubeScheduler, Package: kubernetesModule + "/cmd/kube-scheduler", VersionMarker: kubeMarker, LDFlags: flags},
			{Name: KubeControllerManager, Package: kubernetesModule + "/cmd/kube-controller-manager", VersionMarker: kubeMarker, LDFlags: flags},
		},
	}, nil
}

// Path is the cached location of the named binary.
func (s *Set) Path(name string) string { return filepath.Join(s.Dir, name) }

// Build builds every binary that is missing from the cache (all of them with rebuild) and
// reports progress on out.
func (s *Set) Build(ctx context.Context, out io.Writer, rebuild bool) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return fmt.Errorf("create the binary cache: %w", err)
	}
	fmt.Fprintf(out, "e2e binaries: Kubernetes %s, etcd %s, cache %s\n", s.KubernetesVersion, s.EtcdVersion, s.Dir)
	total := time.Now()
	for _, b := range s.Binaries {
		if err := s.buildOne(ctx, out, b, rebuild); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "e2e binaries ready in %s\n", time.Since(total).Round(time.Second))
	return nil
}

// Missing names the binaries that are not usable from the cache.
func (s *Set) Missing(ctx context.Context) []string {
	var missing []string
	for _, b := range s.Binaries {
		if !s.cached(ctx, b) {
			missing = append(missing, b.Name)
		}
	}
	return missing
}

func (s *Set) cached(ctx context.Context, b Binary) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := exec.CommandContext(ctx, s.Path(b.Name), "--version").CombinedOutput()
	return err == nil && bytes.Contains(got, []byte(b.VersionMarker))
}

func (s *Set) build(ctx context.Context, out io.Writer, b Binary) error {
	tmp := s.Path(b.Name) + ".tmp"
	args := []string{"build", "-trimpath", "-buildvcs=false", "-o", tmp, "-ldflags", strings.Join(append([]string{"-s", "-w"}, b.LDFlags...), " "), b.Package}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = s.ModuleDir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), s.Env...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	stopBeat := heartbeat(out, b.Name)
	err := cmd.Run()
	stopBeat()
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), s.ModuleDir, err, stderr.String())
	}
	if err := os.Rename(tmp, s.Path(b.Name)); err != nil {
		return fmt.Errorf("install %s: %w", b.Name, err)
	}
	return nil
}

// heartbeat prints a line every minute until the returned function is called.
func heartbeat(out io.Writer, name string) func() {
	done := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(out, "  %-24s still building (%s)\n", name, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done) }
}

// versionLDFlags stamps a Kubernetes version into component-base and client-go, as the
// Kubernetes build scripts do: without it the binaries report v0.0.0-master and clients refuse
// them.
func versionLDFlags(kv string) ([]string, error) {
	v, err := version.ParseSemantic(kv)
	if err != nil {
		return nil, fmt.Errorf("pinned %s version %q: %w", kubernetesModule, kv, err)
	}
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			fmt.Sprintf("-X %s.gitVersion=%s", pkg, kv),
			fmt.Sprintf("-X %s.gitMajor=%d", pkg, v.Major()),
			fmt.Sprintf("-X %s.gitMinor=%d", pkg, v.Minor()),
			fmt.Sprintf("-X %s.gitTreeState=clean", pkg),
		)
	}
	return flags, nil
}

func cacheRoot() (string, error) {
	if dir := os.Getenv("GPUDRA_E2E_CACHE"); dir != "" {
		return filepath.Abs(dir)
	}
	home, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set GPUDRA_E2E_CACHE): %w", err)
	}
	return filepath.Join(home, "gpudra-e2e"), nil
}

func moduleDir(ctx context.Context) (string, error) {
	got, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(got))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module: run from test/e2e")
	}
	return filepath.Dir(gomod), nil
}

func moduleVersions(ctx context.Context, dir string, modules ...string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-m", "-json"}, modules...)...)
	cmd.Dir = dir
	got, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m %s in %s: %w", strings.Join(modules, " "), dir, err)
	}
	versions := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(got))
	for dec.More() {
		var m struct{ Path, Version string }
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("go list -m output: %w", err)
		}
		versions[m.Path] = m.Version
	}
	for _, m := range modules {
		if versions[m] == "" {
			return nil, fmt.Errorf("%s does not require %s", filepath.Join(dir, "go.mod"), m)
		}
	}
	return versions, nil
}
