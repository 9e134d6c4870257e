package binaries

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// patchModulePrefix turns a patch's top directory into the module it patches: "kubernetes"
// is k8s.io/kubernetes, "dynamic-resource-allocation" is k8s.io/dynamic-resource-allocation.
const patchModulePrefix = "k8s.io/"

// patchTopDir is the first path element of a patched file: a module name, no dots or slashes.
var patchTopDir = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// appliedStamp marks a workspace whose module copies carry the patch completely; its content
// is the workspace directory's name, which carries the patch's key.
const appliedStamp = "applied"

// Patched returns a Set of the named binaries (kube-scheduler, say) built from the pinned module
// sources with the unified diff patchFile applied, for running beside the unpatched ones.
//
// The patch's paths are <dir>/<path in module>, the top directory naming the module
// k8s.io/<dir>. Each such module is copied from the module cache into a workspace outside the
// repository, <cache root>/k8s-<version>-patch-<name>-<hash>/, the patch is applied there with
// git apply, and the binaries are built through a go.work that uses test/e2e's module and
// replaces the patched modules with the copies. The directory's name carries a hash of the
// Kubernetes version, the patched modules' versions and the patch, so a changed patch or pin
// builds afresh and an unchanged one reuses both the copies and the binaries.
func (s *Set) Patched(ctx context.Context, out io.Writer, patchFile string, names ...string) (*Set, error) {
	patch, err := os.ReadFile(patchFile)
	if err != nil {
		return nil, fmt.Errorf("read patch: %w", err)
	}
	dirs, err := patchedDirs(patch)
	if err != nil {
		return nil, fmt.Errorf("patch %s: %w", patchFile, err)
	}
	mods, err := moduleDirs(ctx, s.ModuleDir, dirs)
	if err != nil {
		return nil, err
	}
	p, err := s.patchedSet(patchFile, patch, mods, names)
	if err != nil {
		return nil, err
	}
	if err := prepareWorkspace(ctx, out, p.Dir, s.ModuleDir, patchFile, patch, mods); err != nil {
		return nil, err
	}
	if err := p.Build(ctx, out, false); err != nil {
		return nil, err
	}
	return p, nil
}

// module is one module of the build list: its pinned version and its directory in the module
// cache, under the name of its directory in a patch.
type module struct {
	Path, Version, Dir string
}

// patchedSet is the Set of the named binaries in the patch's workspace, building with its
// go.work.
func (s *Set) patchedSet(patchFile string, patch []byte, mods map[string]module, names []string) (*Set, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", s.KubernetesVersion)
	for _, dir := range slices.Sorted(maps.Keys(mods)) {
		fmt.Fprintf(h, "%s %s\n", mods[dir].Path, mods[dir].Version)
	}
	h.Write(patch)
	key := hex.EncodeToString(h.Sum(nil))[:12]
	name := strings.TrimSuffix(filepath.Base(patchFile), filepath.Ext(patchFile))
	dir := filepath.Join(filepath.Dir(s.Dir), fmt.Sprintf("k8s-%s-patch-%s-%s", s.KubernetesVersion, name, key))
	p := &Set{Dir: dir, ModuleDir: s.ModuleDir, KubernetesVersion: s.KubernetesVersion, EtcdVersion: s.EtcdVersion,
		Env: append(slices.Clone(s.Env), "GOWORK="+filepath.Join(dir, "go.work"))}
	for _, n := range names {
		i := slices.IndexFunc(s.Binaries, func(b Binary) bool { return b.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("patched binary %q: not one of this set's binaries", n)
		}
		p.Binaries = append(p.Binaries, s.Binaries[i])
	}
	return p, nil
}

// patchedDirs lists the top directories of the files a unified diff changes ("+++ b/<dir>/..."
// lines, as git apply's default -p1 reads them; "/dev/null" for deleted files is skipped), each
// checked to be a plain module name.
func patchedDirs(patch []byte) ([]string, error) {
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(patch))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "+++ ") || strings.HasPrefix(line, "+++ /dev/null") {
			continue
		}
		path := strings.Fields(line)[1]
		dir, rest, ok := strings.Cut(strings.TrimPrefix(path, "b/"), "/")
		if !strings.HasPrefix(path, "b/") || !ok || rest == "" || !patchTopDir.MatchString(dir) {
			return nil, fmt.Errorf("file %q: want b/<module dir>/<path>, the module dir in [a-z0-9-]", path)
		}
		seen[dir] = true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("changes no file (no \"+++ b/<module dir>/...\" line)")
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// moduleDirs resolves each patch directory to its module in the build list of the module in
// dir, downloading it if needed.
func moduleDirs(ctx context.Context, dir string, patchDirs []string) (map[string]module, error) {
	args := []string{"mod", "download", "-json"}
	for _, d := range patchDirs {
		args = append(args, patchModulePrefix+d)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	got, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s in %s: %w", strings.Join(args, " "), dir, err)
	}
	mods := map[string]module{}
	dec := json.NewDecoder(bytes.NewReader(got))
	for dec.More() {
		var m module
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("go mod download output: %w", err)
		}
		mods[strings.TrimPrefix(m.Path, patchModulePrefix)] = m
	}
	for _, d := range patchDirs {
		if mods[d].Dir == "" {
			return nil, fmt.Errorf("patch directory %s: module %s%s is not in %s's build list", d, patchModulePrefix, d, dir)
		}
	}
	return mods, nil
}

// prepareWorkspace makes dir hold src/<module dir> copies of mods with the patch applied
// (unless its stamp says it does already) and a go.work that uses moduleDir and replaces the
// modules with them. The go.work is written on every call: the cache outlives the checkout
// that made it (CI's clean checkouts, worktrees), and a go.work naming a checkout that is gone
// fails every build through it.
func prepareWorkspace(ctx context.Context, out io.Writer, dir, moduleDir, patchFile string, patch []byte, mods map[string]module) error {
	if err := prepareSources(ctx, out, dir, patchFile, patch, mods); err != nil {
		return err
	}
	return writeGoWork(ctx, dir, moduleDir, mods)
}

// prepareSources makes dir hold src/<module dir> copies of mods with the patch applied, unless
// its stamp says it does already. A workspace left half-made by an interrupted run has no stamp
// and is made again from scratch.
func prepareSources(ctx context.Context, out io.Writer, dir, patchFile string, patch []byte, mods map[string]module) error {
	stamp := filepath.Join(dir, appliedStamp)
	if got, err := os.ReadFile(stamp); err == nil && bytes.Equal(got, []byte(filepath.Base(dir))) {
		return nil
	}
	start := time.Now()
	fmt.Fprintf(out, "patched sources: %s into %s\n", filepath.Base(patchFile), dir)
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(src); err != nil {
		return fmt.Errorf("clear the patched sources: %w", err)
	}
	for d, m := range mods {
		fmt.Fprintf(out, "  copy %s@%s\n", m.Path, m.Version)
		if err := os.CopyFS(filepath.Join(src, d), os.DirFS(m.Dir)); err != nil {
			return fmt.Errorf("copy %s from %s: %w", m.Path, m.Dir, err)
		}
	}
	apply := exec.CommandContext(ctx, "git", "apply", "--whitespace=nowarn", "-")
	apply.Dir, apply.Stdin = src, bytes.NewReader(patch)
	if got, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("git apply %s in %s: %w\n%s", patchFile, src, err, got)
	}
	// The stamp is written last: only a complete workspace has it.
	if err := os.WriteFile(stamp, []byte(filepath.Base(dir)), 0o644); err != nil {
		return fmt.Errorf("stamp the patched sources: %w", err)
	}
	fmt.Fprintf(out, "patched sources ready in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// writeGoWork writes dir/go.work with the go command: it uses the e2e module and replaces each
// patched module with its copy under dir/src. It writes a file of its own and renames it into
// place, so that a build through the workspace meanwhile (scheduler_perf's beside the bench's)
// reads the old go.work or the new one, never none.
func writeGoWork(ctx context.Context, dir, moduleDir string, mods map[string]module) error {
	tmp := filepath.Join(dir, fmt.Sprintf("go.%d.tmp.work", os.Getpid()))
	_ = os.Remove(tmp)
	defer os.Remove(tmp)
	steps := [][]string{{"work", "init", moduleDir}}
	for _, d := range slices.Sorted(maps.Keys(mods)) {
		steps = append(steps, []string{"work", "edit", "-replace=" + mods[d].Path + "=./src/" + d})
	}
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK="+tmp)
		if got, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, got)
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, "go.work")); err != nil {
		return fmt.Errorf("put the workspace's go.work in place: %w", err)
	}
	return nil
}
