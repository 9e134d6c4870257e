package binaries

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPatchedDirs: the modules a patch touches are the top directories of its "+++ b/" paths,
// each once, and a path that is not <module dir>/<file> is refused rather than copied or
// applied somewhere unexpected.
func TestPatchedDirs(t *testing.T) {
	for name, tc := range map[string]struct {
		patch   string
		want    []string
		wantErr bool
	}{
		"two modules, one twice": {
			patch: "header text\n--- a/kubernetes/pkg/x.go\n+++ b/kubernetes/pkg/x.go\n@@ -1 +1 @@\n" +
				"--- a/dynamic-resource-allocation/a.go\n+++ b/dynamic-resource-allocation/a.go\n" +
				"--- a/kubernetes/pkg/y.go\n+++ b/kubernetes/pkg/y.go\n",
			want: []string{"dynamic-resource-allocation", "kubernetes"},
		},
		"a deleted file names no module": {
			patch: "--- a/kubernetes/pkg/x.go\n+++ /dev/null\n--- a/kubernetes/pkg/y.go\n+++ b/kubernetes/pkg/y.go\n",
			want:  []string{"kubernetes"},
		},
		"a file at the top":       {patch: "+++ b/go.mod\n", wantErr: true},
		"a path out of the tree":  {patch: "+++ b/../etc/passwd\n", wantErr: true},
		"a module path with dots": {patch: "+++ b/k8s.io/kubernetes/x.go\n", wantErr: true},
		"no file":                 {patch: "just text\n", wantErr: true},
		"no b/ prefix":            {patch: "+++ kubernetes/pkg/x.go\n", wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := patchedDirs([]byte(tc.patch))
			if (err != nil) != tc.wantErr {
				t.Fatalf("patchedDirs: error %v, want an error: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("patchedDirs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPatchedSetKey: the patched Set's directory changes with the patch, the Kubernetes version
// and a patched module's version (so no stale binary is reused), stays put otherwise, and its
// builds use that directory's go.work.
func TestPatchedSetKey(t *testing.T) {
	base := &Set{Dir: "/cache/k8s-v1.37.2", ModuleDir: "/repo/test/e2e", KubernetesVersion: "v1.37.2",
		Binaries: []Binary{{Name: KubeAPIServer}, {Name: KubeScheduler}}}
	mods := map[string]module{"kubernetes": {Path: "k8s.io/kubernetes", Version: "v1.37.2"}}
	dirOf := func(s *Set, patch string, mods map[string]module) string {
		t.Helper()
		p, err := s.patchedSet("/repo/test/e2e/patches/pool-cache.patch", []byte(patch), mods, []string{KubeScheduler})
		if err != nil {
			t.Fatal(err)
		}
		return p.Dir
	}
	first := dirOf(base, "+++ b/kubernetes/x.go\n", mods)
	if got := dirOf(base, "+++ b/kubernetes/x.go\n", mods); got != first {
		t.Errorf("the same inputs give %s and %s", first, got)
	}
	newer := *base
	newer.KubernetesVersion = "v1.37.3"
	for name, got := range map[string]string{
		"another patch":              dirOf(base, "+++ b/kubernetes/y.go\n", mods),
		"another Kubernetes version": dirOf(&newer, "+++ b/kubernetes/x.go\n", mods),
		"another module version": dirOf(base, "+++ b/kubernetes/x.go\n",
			map[string]module{"kubernetes": {Path: "k8s.io/kubernetes", Version: "v1.37.3"}}),
	} {
		if got == first {
			t.Errorf("%s reuses the directory %s", name, got)
		}
	}
	p, err := base.patchedSet("/repo/test/e2e/patches/pool-cache.patch", nil, mods, []string{KubeScheduler})
	if err != nil {
		t.Fatal(err)
	}
	want := &Set{Dir: p.Dir, ModuleDir: base.ModuleDir, KubernetesVersion: "v1.37.2",
		Binaries: []Binary{{Name: KubeScheduler}}, Env: []string{"GOWORK=" + p.Dir + "/go.work"}}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("patched Set (-want +got):\n%s", diff)
	}
	if _, err := base.patchedSet("x.patch", nil, mods, []string{"kubectl"}); err == nil {
		t.Error("a binary the Set does not have was accepted")
	}
}

// TestWorkspaceFollowsTheCheckout: the patched sources are made once, but the workspace's
// go.work names the checkout of the latest call: the cache outlives checkouts, and a go.work
// naming one that is gone failed every build through it (upstream's scheduler_perf after a
// worktree was removed).
func TestWorkspaceFollowsTheCheckout(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git apply needs git")
	}
	tmp := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(tmp, "modcache", "go.mod"), "module example.com/kube\n\ngo 1.26\n")
	write(filepath.Join(tmp, "modcache", "x.go"), "package kube\n")
	for _, c := range []string{"checkout-1", "checkout-2"} {
		write(filepath.Join(tmp, c, "go.mod"), "module example.com/e2e\n\ngo 1.26\n")
	}
	mods := map[string]module{"kube": {Path: "example.com/kube", Version: "v0.0.1", Dir: filepath.Join(tmp, "modcache")}}
	patch := []byte("--- a/kube/x.go\n+++ b/kube/x.go\n@@ -1 +1,2 @@\n package kube\n+// patched\n")
	ws := filepath.Join(tmp, "k8s-v0-patch-p-0123456789ab")
	marker := filepath.Join(ws, "src", "kube", "made-once")
	for i, c := range []string{"checkout-1", "checkout-2"} {
		moduleDir := filepath.Join(tmp, c)
		if err := prepareWorkspace(context.Background(), io.Discard, ws, moduleDir, "p.patch", patch, mods); err != nil {
			t.Fatalf("prepareWorkspace from %s: %v", c, err)
		}
		work, err := os.ReadFile(filepath.Join(ws, "go.work"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(work), "use "+moduleDir+"\n") {
			t.Errorf("after a call from %s the go.work reads:\n%s\nwant it to use %s", c, work, moduleDir)
		}
		src, err := os.ReadFile(filepath.Join(ws, "src", "kube", "x.go"))
		if err != nil || string(src) != "package kube\n// patched\n" {
			t.Errorf("patched source after a call from %s: %q, %v", c, src, err)
		}
		if i == 0 {
			write(marker, "") // gone if the second call copies the sources again
		} else if _, err := os.Stat(marker); err != nil {
			t.Errorf("the second call made the patched sources again: %v", err)
		}
	}
}
