package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpudra/gpudra/cdi/cditest"
)

// cliCase is one command line and what it must do.
type cliCase struct {
	name string
	args []string
	code int
	// stdout and stderr must contain these (when set); notStdout must not be in stdout.
	stdout, stderr, notStdout string
}

func runCases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, c.args...)
			got := cliResult{code, strings.Contains(out, c.stdout), strings.Contains(errOut, c.stderr),
				c.notStdout != "" && strings.Contains(out, c.notStdout)}
			want := cliResult{Code: c.code, Stdout: true, Stderr: true}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%q (-want +got):\n%s\nstdout:\n%s\nstderr:\n%s", c.args, diff, out, errOut)
			}
		})
	}
}

type cliResult struct {
	Code                          int
	Stdout, Stderr, NotStdoutSeen bool
}

// TestExitCodes: 0 ok, 1 the answer is "no", 2 usage error, 3 runtime failure, as --help says.
func TestExitCodes(t *testing.T) {
	runCases(t, []cliCase{
		{name: "ok", args: []string{"render", "--machine", "l4x8"}, code: 0, stdout: "kind: ResourceSlice"},
		{name: "no: invalid layout", args: []string{"mig", "validate", "--gpu", "A100-SXM4-80GB", "--profiles", "3g.40gb,3g.40gb,1g.10gb"},
			code: 1, stderr: "invalid: "},
		{name: "no: unschedulable claim", args: []string{"check", "../deploy/workloads/10-mig-invalid-profile.yaml"}, code: 1, stdout: "UNSCHEDULABLE"},
		{name: "no: invalid mig-parted config", args: []string{"mig", "check-config", "../deploy/mig-parted/config.yaml"}, code: 1, stdout: "too-many: INVALID"},
		{name: "usage: unknown command", args: []string{"rendr"}, code: 2, stderr: `unknown command "rendr" (did you mean render?)`},
		{name: "usage: unknown subcommand", args: []string{"mig", "valdate"}, code: 2, stderr: `unknown command "valdate" (did you mean validate?)`},
		{name: "usage: no command", args: nil, code: 2, stderr: "a command is required"},
		{name: "usage: no subcommand", args: []string{"mig"}, code: 2, stderr: "needs a subcommand"},
		{name: "usage: unknown flag", args: []string{"render", "--bogus"}, code: 2, stderr: "unknown flag: --bogus"},
		{name: "usage: Go-style single dash", args: []string{"render", "-machine", "l4x8"}, code: 2, stderr: "long flags take two dashes: --machine"},
		{name: "usage: bad flag value", args: []string{"topo", "--best", "four"}, code: 2, stderr: `invalid argument "four"`},
		{name: "usage: missing argument", args: []string{"mig", "check-config"}, code: 2, stderr: "needs FILE"},
		{name: "usage: extra argument", args: []string{"mig", "check-config", "a.yaml", "b.yaml"}, code: 2, stderr: `extra arguments "b.yaml"`},
		{name: "usage: missing file", args: []string{"mig", "check-config", "/nonexistent.yaml"}, code: 2, stderr: "no such file"},
		// A flag naming a file that cannot be read is a usage error (issue 29; this was exit 3).
		{name: "usage: unreadable kubeconfig", args: []string{"serve", "--node-name", "n1", "--kubeconfig", "/nonexistent/kubeconfig"}, code: 2,
			stderr: "kubernetes client configuration"},
	})
}

// TestFlagsAfterPositionals: flags are read wherever they are; arguments a command does not
// take are refused instead of silently ending flag parsing (render oops --machine l4x8 used to
// render the default DGX A100 and exit 0).
func TestFlagsAfterPositionals(t *testing.T) {
	runCases(t, []cliCase{
		{name: "render oops", args: []string{"render", "oops", "--machine", "l4x8"}, code: 2, stderr: `takes no arguments, got "oops"`},
		{name: "check-config FILE --machine", args: []string{"mig", "check-config", "../deploy/mig-parted/config.yaml", "--machine", "a30x4"},
			code: 1, stdout: "INVALID on a30x4"},
		{name: "check FILE --machine", args: []string{"check", "../deploy/workloads/18-cel-product-name.yaml", "--machine", "dgx-h100"},
			code: 1, stdout: "(machine: dgx-h100)"},
		// 2g.10gb@0 takes memory slices 0-1; 3g.20gb starts at 0 or 4 on an A100-40GB, so 4.
		{name: "mig validate flags in any order", args: []string{"mig", "validate", "--profiles", "3g.20gb,2g.10gb@0", "--gpu", "A100-SXM4-40GB"},
			code: 0, stdout: "valid: 3g.20gb@4,2g.10gb@0"},
		{name: "flags between command and subcommand args", args: []string{"mig", "check-config", "--config", "inference-mix", "../deploy/mig-parted/config.yaml"},
			code: 0, stdout: "inference-mix: valid on dgx-a100-40gb", notStdout: "too-many"},
	})
}

// TestHelp: help goes to stdout with exit 0 (--help, -h, help CMD); each command lists the node
// flags it uses and no other; flags that earlier versions accepted everywhere still parse, with
// a warning that they do nothing there.
func TestHelp(t *testing.T) {
	runCases(t, []cliCase{
		{name: "--help", args: []string{"--help"}, code: 0, stdout: "Exit status:\n  0  success"},
		{name: "help render", args: []string{"help", "render"}, code: 0, stdout: "--mig-config"},
		{name: "render -h", args: []string{"render", "-h"}, code: 0, stdout: "--consumable-memory"},
		{name: "mig validate --help", args: []string{"mig", "validate", "--help"}, code: 0, stdout: "exits 0 when\nthe layout is valid and 1"},
		{name: "no-op flag warns", args: []string{"topo", "--dynamic-mig"}, code: 0, stdout: "GPU0", stderr: "--dynamic-mig has no effect on topo"},
	})
	// The node flags each command uses: topology ignores MIG and publishing options; inventory
	// shows the machine, not what is published; check-config checks a file, not --mig-config.
	uses := map[string][]string{
		"render":           {"nvml", "machine", "mig-config", "node-name", "dynamic-mig", "consumable-memory"},
		"check":            {"nvml", "machine", "mig-config", "node-name", "dynamic-mig", "consumable-memory"},
		"serve":            {"nvml", "machine", "mig-config", "node-name", "dynamic-mig", "consumable-memory"},
		"demo":             {"machine", "mig-config", "node-name", "dynamic-mig", "consumable-memory"},
		"inventory":        {"nvml", "machine", "mig-config"},
		"topo":             {"nvml", "machine"},
		"mig check-config": {"nvml", "machine"},
		"mig validate":     {},
		"version":          {},
	}
	for command, want := range uses {
		_, out, _ := runCLI(t, append(strings.Fields(command), "--help")...)
		var got []string
		for _, f := range allNodeFlags {
			if strings.Contains(out, "--"+f+" ") {
				got = append(got, f)
			}
		}
		if diff := cmp.Diff(want, got, cmpEmpty); diff != "" {
			t.Errorf("%s --help: node flags (-want +got):\n%s", command, diff)
		}
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") })

// TestCompletion: the completion command writes shell scripts, and flag values complete.
func TestCompletion(t *testing.T) {
	runCases(t, []cliCase{
		{name: "bash", args: []string{"completion", "bash"}, code: 0, stdout: "bash completion V2 for gpu-dra-driver"},
		{name: "zsh", args: []string{"completion", "zsh"}, code: 0, stdout: "#compdef gpu-dra-driver"},
		{name: "machine values", args: []string{"__complete", "render", "--machine", ""}, code: 0, stdout: "l4x8\n"},
		{name: "gpu values", args: []string{"__complete", "mig", "profiles", "--gpu", "A3"}, code: 0, stdout: "A30\n"},
	})
}

// TestVersion: the Go version is the running one, commit and NVML say "not available" rather
// than nothing when unknown, and -o json has the same fields.
func TestVersion(t *testing.T) {
	code, out, errOut := runCLI(t, "version", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	if v.Go != runtime.Version() {
		t.Errorf("go = %q, want %q", v.Go, runtime.Version())
	}
	// A test binary carries no VCS stamp.
	if v.Commit != notAvailable {
		t.Errorf("commit = %q, want %q in a test binary", v.Commit, notAvailable)
	}
	if v.NVML == "" || (!strings.HasPrefix(v.NVML, notAvailable+" (") && !strings.Contains(v.NVML, "(driver ")) {
		t.Errorf("nvml = %q, want a version with its driver or %q with the reason", v.NVML, notAvailable)
	}
	_, text, _ := runCLI(t, "version")
	for _, want := range []string{"module:  " + v.Module, "go:      " + v.Go, "nvml:    " + v.NVML} {
		if !strings.Contains(text, want) {
			t.Errorf("version text lacks %q:\n%s", want, text)
		}
	}
}

// TestFormerSilentAccepts: each input the CLI used to accept while doing something else than
// asked is now a clear error (or, where asked for, done).
func TestFormerSilentAccepts(t *testing.T) {
	dir := t.TempDir()
	badIndex := filepath.Join(dir, "bad-index.yaml")
	writeFile(t, badIndex, "version: v1\nmig-configs:\n  eight:\n    - devices: [0, 9]\n      mig-enabled: false\n    - devices: all\n      mig-enabled: false\n")
	runCases(t, []cliCase{
		{name: "topo --best -1", args: []string{"topo", "--best", "-1"}, code: 2, stderr: "--best=-1: want a number of GPUs, at least 1"},
		{name: "topo --best 0", args: []string{"topo", "--best", "0"}, code: 2, stderr: "--best=0"},
		// The matrix is not printed before the error.
		{name: "topo --best 99", args: []string{"topo", "--best", "99"}, code: 2, stderr: "--best=99: dgx-a100-40gb has 8 GPUs", notStdout: "GPU0"},
		{name: "dynamic MIG drops consumable memory", args: []string{"render", "--dynamic-mig", "--consumable-memory"}, code: 2,
			stderr: "(GPUs 0,1,2,3,4,5,6,7 of dgx-a100-40gb); drop one of the two flags"},
		{name: "mig-config without MIG GPUs", args: []string{"render", "--machine", "l4x8", "--mig-config", "all-balanced"}, code: 2,
			stderr: "it enables MIG, but no GPU is MIG-capable (NVIDIA L4)"},
		{name: "mig-config disabling MIG without MIG GPUs", args: []string{"render", "--machine", "l4x8", "--mig-config", "all-disabled"}, code: 0,
			stdout: "kind: ResourceSlice"},
		{name: "invalid node name", args: []string{"render", "--node-name", "GPU_node"}, code: 2, stderr: `node name "GPU_node" is not a Kubernetes node name`},
		{name: "check-config enabling MIG on no GPU", args: []string{"mig", "check-config", "../deploy/mig-parted/config.yaml", "--machine", "l4x8", "--config", "too-many"},
			code: 1, stdout: "too-many: INVALID on l4x8\n  reason: mig config \"too-many\" on l4x8: it enables MIG, but no GPU is MIG-capable", stderr: "too-many"},
		{name: "check-config missing device index", args: []string{"mig", "check-config", badIndex}, code: 1,
			stdout: "entry 0 names device 9, but the machine has GPUs 0-7 only", stderr: "1 of 1 configurations invalid"},
		{name: "check-config unknown --config", args: []string{"mig", "check-config", badIndex, "--config", "nine"}, code: 2, stderr: `--config="nine"`},
	})
	// A configuration wrong for all eight GPUs says so once.
	// The reason is on stdout, with the verdict: 2>/dev/null still says why.
	code, out, _ := runCLI(t, "mig", "check-config", "../deploy/mig-parted/config.yaml", "--config", "too-many")
	if n := strings.Count(out, `mig config "too-many"`); n != 1 || code != 1 {
		t.Errorf("check-config exits %d and names the failing configuration %d times, want 1 and once:\n%s", code, n, out)
	}
	if !strings.Contains(out, "too-many: INVALID on dgx-a100-40gb\n  reason: ") || !strings.Contains(out, "devices 0-7 (A100-SXM4-40GB)") {
		t.Errorf("check-config does not give the reason, naming the GPUs it applies to, with the verdict:\n%s", out)
	}
	// --only trims spaces as --profiles does.
	_, spaced, _ := runCLI(t, "mig", "layouts", "--gpu", "A30", "--only", " 1g.6gb , 2g.12gb ")
	_, plain, _ := runCLI(t, "mig", "layouts", "--gpu", "A30", "--only", "1g.6gb,2g.12gb")
	if diff := cmp.Diff(plain, spaced); diff != "" || !strings.Contains(plain, "valid layouts on A30") {
		t.Errorf("--only with spaces differs from without (-plain +spaced):\n%s", diff)
	}
}

// TestTopoBestJSON: -o json carries the best set that the table prints.
func TestTopoBestJSON(t *testing.T) {
	_, table, _ := runCLI(t, "topo", "--machine", "dgx-h100", "--best", "4")
	code, out, errOut := runCLI(t, "topo", "--machine", "dgx-h100", "--best", "4", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		GPUs    []json.RawMessage `json:"gpus"`
		BestSet []int             `json:"bestSet"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.GPUs) != 8 || len(got.BestSet) != 4 {
		t.Fatalf("topo -o json: %d GPUs, best set %v; want 8 GPUs and 4 in the set", len(got.GPUs), got.BestSet)
	}
	if want := fmt.Sprintf("best set of 4 GPUs: %v\n", got.BestSet); !strings.Contains(table, want) {
		t.Errorf("the table does not print the JSON's best set (%q):\n%s", want, table)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveDirs are serve's directory flags under dir.
// shortPluginDir is a plugin directory short enough for MPS control sockets below it (serve
// refuses one that is not; t.TempDir's names are long): a fresh directory name below the
// temporary directory, not created, removed at the end of the test.
func shortPluginDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func serveDirs(t *testing.T, dir string) []string {
	t.Helper()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// A configuration that loads; nothing listens on its server.
	writeFile(t, kubeconfig, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`)
	return []string{"--kubeconfig", kubeconfig, "--plugin-dir", shortPluginDir(t), "--registrar-dir", filepath.Join(dir, "registry"),
		"--cdi-root", filepath.Join(dir, "cdi"), "--state-dir", filepath.Join(dir, "state")}
}

// TestServeChecksFlagsBeforeCreatingDirectories: a flag value that serve can only judge on the
// machine (a mig-parted config its GPUs cannot use) or that used to fail only when served
// (--metrics-addr) is a usage error, and serve has created none of its directories.
func TestServeChecksFlagsBeforeCreatingDirectories(t *testing.T) {
	cases := []struct {
		name  string
		flags []string
		want  string
	}{
		{"mig-config on a machine without MIG", []string{"--machine", "l4x8", "--mig-config", "all-balanced"}, "no GPU is MIG-capable"},
		{"unknown mig-config", []string{"--mig-config", "all-bogus"}, "neither a file nor a built-in"},
		{"unknown machine", []string{"--machine", "dgx-z"}, `--machine="dgx-z"`},
		{"metrics address", []string{"--metrics-addr", "8080"}, `--metrics-addr="8080": want HOST:PORT`},
		{"metrics port out of range", []string{"--metrics-addr", ":99999"}, `--metrics-addr=":99999": want HOST:PORT`},
		{"metrics port not a service", []string{"--metrics-addr", ":no-such-port"}, `--metrics-addr=":no-such-port": want HOST:PORT`},
		{"API QPS not a number", []string{"--kube-api-qps", "NaN"}, `--kube-api-qps=NaN`},
		{"API QPS infinite", []string{"--kube-api-qps", "+Inf"}, `--kube-api-qps=+Inf`},
		{"health taint effect", []string{"--health-taint-effect", "Evict"}, `NoExecute`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append(append([]string{"serve", "--nvml", "fake", "--node-name", "n1"}, serveDirs(t, dir)...), c.flags...)
			code, _, errOut := runCLI(t, args...)
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var created []string
			for _, e := range entries {
				if e.IsDir() {
					created = append(created, e.Name())
				}
			}
			got := cliResult{Code: code, Stderr: strings.Contains(errOut, c.want)}
			if diff := cmp.Diff(cliResult{Code: 2, Stderr: true}, got); diff != "" || len(created) > 0 {
				t.Errorf("(-want +got):\n%s\ndirectories created: %v\nstderr: %s", diff, created, errOut)
			}
		})
	}
}

// TestServeErrorsNameNoGoOptions: a driver root without a driver fails with a hint for the
// person running the command, not the name of a Go option of the cdi package.
func TestServeErrorsNameNoGoOptions(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "driver-root")
	if err := os.Mkdir(empty, 0o750); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"serve", "--nvml", "fake", "--node-name", "n1"}, serveDirs(t, dir)...), "--driver-root", empty)
	code, _, errOut := runCLI(t, args...)
	if code != 3 || !strings.Contains(errOut, "is the NVIDIA kernel module loaded?") || strings.Contains(errOut, "With") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 3, the kernel-module hint and no Go option name", code, errOut)
	}
}

// TestDynamicMIGWithConsumableMemory: where no GPU is MIG-capable, both flags apply (every L4
// is shared by memory); where dynamic MIG would take the GPUs, offline commands refuse (see
// TestFormerSilentAccepts) and serve, which a chart may start with both on mixed nodes, says
// which GPUs lose consumable memory.
func TestDynamicMIGWithConsumableMemory(t *testing.T) {
	code, out, errOut := runCLI(t, "render", "--machine", "l4x8", "--dynamic-mig", "--consumable-memory")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	shared := 0
	for _, s := range renderedSlices(t, out) {
		for _, d := range s.Spec.Devices {
			if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
				shared++
			}
		}
	}
	if shared != 8 {
		t.Errorf("%d of l4x8's 8 GPUs are shared by memory, want all", shared)
	}

	var warnings []string
	nf := nodeFlags{nvmlMode: "fake", machine: "dgx-a100-40gb", nodeName: "n1", dynamicMIG: true, consumableMemory: true,
		warn: func(msg string) { warnings = append(warnings, msg) }}
	n, err := nf.open(context.Background())
	if err != nil {
		t.Fatalf("with a warning function, the combination is not an error: %v", err)
	}
	n.close()
	if len(warnings) != 1 || !strings.Contains(warnings[0], "GPUs 0,1,2,3,4,5,6,7 of dgx-a100-40gb") {
		t.Errorf("warnings %q, want one naming the 8 GPUs", warnings)
	}
}

// TestBuildVersion: the commit comes from the VCS stamp go build records, "(modified)" when the
// work tree had changes; without a stamp it is "not available", never empty.
func TestBuildVersion(t *testing.T) {
	mod := debug.Module{Path: "github.com/gpudra/gpudra", Version: "v0.2.0"}
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		want versionInfo
	}{
		{"no build info", nil, versionInfo{Module: "github.com/gpudra/gpudra", Version: notAvailable, Commit: notAvailable, Go: runtime.Version()}},
		{"go run", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/gpudra/gpudra", Version: "(devel)"}},
			versionInfo{Module: "github.com/gpudra/gpudra", Version: "(devel)", Commit: notAvailable, Go: "go1.26.1"}},
		{"clean checkout", &debug.BuildInfo{GoVersion: "go1.26.1", Main: mod, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "3c82c8b"}, {Key: "vcs.modified", Value: "false"}}},
			versionInfo{Module: "github.com/gpudra/gpudra", Version: "v0.2.0", Commit: "3c82c8b", Go: "go1.26.1"}},
		{"modified checkout", &debug.BuildInfo{GoVersion: "go1.26.1", Main: mod, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "3c82c8b"}, {Key: "vcs.modified", Value: "true"}}},
			versionInfo{Module: "github.com/gpudra/gpudra", Version: "v0.2.0", Commit: "3c82c8b (modified)", Go: "go1.26.1"}},
	}
	for _, c := range cases {
		if diff := cmp.Diff(c.want, buildVersion(c.bi)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestServeRefusesANodeWithADevicePlugin: a Node that reports nvidia.com/gpu from the device
// plugin makes serve refuse to publish (both would give the same GPUs away), unless the
// operator says otherwise.
func TestServeRefusesANodeWithADevicePlugin(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}
	for _, allow := range []bool{false, true} {
		s := &serveFlags{allowDevicePlugin: allow}
		s.node.nodeName = "n1"
		err := s.guardDevicePlugin(context.Background(), fake.NewSimpleClientset(node))
		if got := err != nil && strings.Contains(err.Error(), "--allow-device-plugin"); got == allow {
			t.Errorf("allow=%v: guard error %v", allow, err)
		}
	}
}

// TestNVMLLoadedByPathInTheDriverRoot (issue 27): every --nvml=real command loads NVML by its
// absolute path in --driver-root, following the root's own absolute symbolic links inside the
// root, instead of by name through a loader path that would have to include the root's
// libraries. The fake library is no ELF file, so loading fails and the error names the path
// that was tried; a root without NVML names the root.
func TestNVMLLoadedByPathInTheDriverRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "driver-root")
	if _, err := cditest.Build(root, cditest.Layout{}); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(cditest.DefaultLibDir, "libnvidia-ml.so."+cditest.DefaultVersion)
	if err := os.Symlink(lib, filepath.Join(root, cditest.DefaultLibDir, "libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o750); err != nil {
		t.Fatal(err)
	}
	tried := "cannot load " + filepath.Join(root, lib)
	notFound := "libnvidia-ml.so.1 not found in driver root " + empty
	migConfig := filepath.Join(dir, "mig.yaml")
	writeFile(t, migConfig, "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n")
	serve := append([]string{"serve", "--nvml=real", "--node-name", "n1"}, serveDirs(t, dir)...)
	runCases(t, []cliCase{
		{name: "inventory", args: []string{"inventory", "--nvml=real", "--driver-root", root}, code: 3, stderr: tried},
		{name: "topo", args: []string{"topo", "--nvml=real", "--driver-root", root}, code: 3, stderr: tried},
		{name: "render", args: []string{"render", "--nvml=real", "--driver-root", root}, code: 3, stderr: tried},
		{name: "mig check-config", args: []string{"mig", "check-config", "--nvml=real", "--driver-root", root, migConfig}, code: 3, stderr: tried},
		{name: "serve", args: append(serve, "--driver-root", root), code: 3, stderr: tried},
		{name: "serve, root without NVML", args: append(serve, "--driver-root", empty), code: 3, stderr: notFound},
		{name: "version", args: []string{"version", "--driver-root", root}, code: 0, stdout: tried},
		{name: "version, root without NVML", args: []string{"version", "--driver-root", empty}, code: 0, stdout: notFound},
		{name: "relative root", args: []string{"inventory", "--nvml=real", "--driver-root", "driver-root"}, code: 2, stderr: "--driver-root=\"driver-root\": must be an absolute path"},
		{name: "version, relative root", args: []string{"version", "--driver-root", "driver-root"}, code: 2, stderr: "must be an absolute path"},
	})
}

// TestServeRefusesAPluginDirTooDeepForMPS (issue 27): a --plugin-dir whose MPS control sockets
// would not fit a unix socket path is refused at start, before anything is created, unless MPS
// is not among the sharing strategies.
func TestServeRefusesAPluginDirTooDeepForMPS(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, strings.Repeat("d", 100-len(dir)))
	base := append(serveDirs(t, dir), "--plugin-dir", deep) // later flags win
	serve := append([]string{"serve", "--nvml", "fake", "--node-name", "n1"}, base...)
	code, _, errOut := runCLI(t, serve...)
	if code != 2 || !strings.Contains(errOut, "too deep") || !strings.Contains(errOut, "--plugin-dir") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 naming --plugin-dir as too deep for MPS", code, errOut)
	}
	if _, err := os.Stat(deep); !os.IsNotExist(err) {
		t.Errorf("the refused plugin directory was created (%v)", err)
	}
	code, _, errOut = runCLI(t, append(serve, "--sharing-strategies", "TimeSlicing")...)
	if strings.Contains(errOut, "too deep") {
		t.Errorf("exit %d without MPS, stderr:\n%s\nwant no MPS socket check", code, errOut)
	}
}

// TestFlagPlaceholders: pflag turns the first `quoted` word of a flag's usage into its value's
// placeholder in help (--slices FILE); a quoted word meant as emphasis (`render`) would read as
// the value to give. A usage string with backquotes must quote an upper-case placeholder.
func TestFlagPlaceholders(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(f.Usage, "`") {
				return
			}
			if name, _ := pflag.UnquoteUsage(f); name != strings.ToUpper(name) {
				t.Errorf("%s --%s: help shows the value as %q: %q", cmd.CommandPath(), f.Name, name, f.Usage)
			}
		})
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard))
}

// TestNVMLHelpPerCommand: the offline commands only read NVML; serve changes the GPUs (MIG
// instances, compute modes), and its --nvml help must not call real NVML read-only.
func TestNVMLHelpPerCommand(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if f := cmd.Flags().Lookup(flagNVML); f != nil && !f.Hidden {
			readOnly := strings.Contains(f.Usage, "read-only")
			if serve := cmd.Name() == "serve"; serve == readOnly || serve != strings.Contains(f.Usage, "creates and destroys MIG instances") {
				t.Errorf("%s --nvml: %q", cmd.CommandPath(), f.Usage)
			}
		}
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard))
}
