package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	selcheck "github.com/gpudra/gpudra/selectors/check"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/manifest"
)

// checkOutput is the JSON check prints.
type checkOutput struct {
	OK    bool               `json:"ok"`
	Files []*selcheck.Report `json:"files"`
}

func decodeCheck(t *testing.T, out string) checkOutput {
	t.Helper()
	var co checkOutput
	if err := json.Unmarshal([]byte(out), &co); err != nil {
		t.Fatalf("check -o json printed invalid JSON: %v\n%s", err, out)
	}
	return co
}

// readmeExpectations reads examples/deploy/workloads/README.md's table: each file's target
// machine and whether it is expected to fail. The README was written with the workloads, before
// check existed.
func readmeExpectations(t *testing.T) map[string]struct {
	machine string
	fails   bool
} {
	t.Helper()
	f, err := os.Open("../deploy/workloads/README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]struct {
		machine string
		fails   bool
	}{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), " | ")
		if len(cols) != 5 || !strings.HasSuffix(cols[0], ".yaml") {
			continue
		}
		file := strings.TrimPrefix(cols[0], "| ")
		machine, _, _ := strings.Cut(cols[3], " (")
		out[file] = struct {
			machine string
			fails   bool
		}{machine, strings.Contains(cols[4], "**fails**")}
	}
	if len(out) < 30 {
		t.Fatalf("read %d rows from the README table", len(out))
	}
	return out
}

// TestCheckWorkloads is the acceptance test of check: every workload is checked on the machine
// its header names, and passes, except the ones the README says fail, which are unschedulable
// with reasons.
func TestCheckWorkloads(t *testing.T) {
	code, out, errOut := runCLI(t, "check", "-o", "json", "../deploy/workloads")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (some workloads fail by design): %s", code, errOut)
	}
	co := decodeCheck(t, out)
	want := readmeExpectations(t)
	if len(co.Files) != len(want) {
		t.Errorf("checked %d files, the README lists %d", len(co.Files), len(want))
	}
	for _, r := range co.Files {
		name := filepath.Base(r.Source)
		w, ok := want[name]
		if !ok {
			t.Errorf("%s is not in the README", name)
			continue
		}
		if r.Machine != w.machine {
			t.Errorf("%s checked on %q, the README says %q", name, r.Machine, w.machine)
		}
		if r.OK() == w.fails {
			t.Errorf("%s: passes = %v, the README expects it to %s; report: %+v", name, r.OK(), map[bool]string{true: "fail", false: "pass"}[w.fails], r)
		}
		if len(r.Claims) == 0 {
			t.Errorf("%s: no claims simulated", name)
		}
		for _, c := range r.Claims {
			if !c.Allocated && len(c.Reasons) == 0 {
				t.Errorf("%s: claim %s is unschedulable without a reason", name, c.Claim)
			}
		}
	}
}

func TestCheckExitCodes(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("blockedMIGProfiles: ['7g.*']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{[]string{"check", "../deploy/workloads/01-exclusive-gpu.yaml"}, 0, "1 files: 1 pass, 0 fail"},
		{[]string{"check", "../deploy/workloads/10-mig-invalid-profile.yaml"}, 1, "UNSCHEDULABLE"},
		{[]string{"check", "--policy", policy, "../deploy/workloads/05-mig-1g.yaml"}, 0, "PASS"},
		{[]string{"check", "--policy", policy, "../deploy/workloads/10-mig-invalid-profile.yaml"}, 1, "blocked-mig-profile"},
		// --machine overrides the file's target machine: an A100-80GB selector on an H100.
		{[]string{"check", "--machine", "dgx-h100", "../deploy/workloads/18-cel-product-name.yaml"}, 1, "(machine: dgx-h100)"},
		{[]string{"check"}, 2, "needs FILE|DIR|- ..."},
		{[]string{"check", "-o", "xml", "x.yaml"}, 2, "allowed values are table, json"},
		{[]string{"check", "--machine", "l4x8", "--slices", "s.yaml", "x.yaml"}, 2, "choose one machine"},
		{[]string{"check", "--bogus", "x.yaml"}, 2, "unknown flag: --bogus"},
		{[]string{"check", "/nonexistent.yaml"}, 2, "no such file"},
		{[]string{"check", "--policy", "/nonexistent.yaml", "../deploy/workloads/01-exclusive-gpu.yaml"}, 2, "no such file"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%v: exit %d, want %d mentioning %q\nstdout: %s\nstderr: %s", c.args, code, c.code, c.want, out, errOut)
		}
	}
}

// TestCheckTargets: stdin input, and the three other machine sources: a slices file (YAML
// stream or JSON List, as render prints them) and a cluster (a fake API server).
func TestCheckTargets(t *testing.T) {
	dir := t.TempDir()
	var yamlSlices, jsonSlices string
	for format, path := range map[string]*string{"yaml": &yamlSlices, "json": &jsonSlices} {
		code, out, errOut := runCLI(t, "render", "--mig-config", "all-balanced", "-o", format)
		if code != 0 {
			t.Fatalf("render: %s", errOut)
		}
		*path = filepath.Join(dir, "slices."+format)
		if err := os.WriteFile(*path, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	manifest, err := os.ReadFile("../deploy/workloads/05-mig-1g.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cluster := fake.NewClientset(renderedObjects(t, yamlSlices)...)
	ctx := context.Background()
	for name, o := range map[string]checkOptions{
		"slices yaml": {slicesFile: yamlSlices},
		"slices json": {slicesFile: jsonSlices},
		"cluster":     {cluster: cluster},
	} {
		t.Run(name, func(t *testing.T) {
			o.paths, o.output, o.namespace = []string{"-"}, "json", "default"
			o.node.nodeName = "node-1"
			var out bytes.Buffer
			ok, err := check(ctx, o, bytes.NewReader(manifest), &out)
			if err != nil {
				t.Fatal(err)
			}
			co := decodeCheck(t, out.String())
			if !ok || len(co.Files) != 1 || co.Files[0].Source != "-" || len(co.Files[0].Claims) != 1 || !co.Files[0].Claims[0].Allocated {
				t.Errorf("ok=%v, report: %s", ok, out.String())
			}
		})
	}
}

// renderedObjects decodes render's YAML stream.
func renderedObjects(t *testing.T, path string) []runtime.Object {
	t.Helper()
	tg, err := slicesTarget(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, s := range tg.slices {
		out = append(out, s)
	}
	for _, c := range tg.classes {
		out = append(out, c)
	}
	// The classes the driver ships: gpu, mig and vfio (issue 32).
	if len(tg.slices) == 0 || len(tg.classes) != 3 {
		t.Fatalf("render printed %d slices and %d classes", len(tg.slices), len(tg.classes))
	}
	return out
}

func TestCheckClusterWithoutSlices(t *testing.T) {
	_, err := clusterTarget(context.Background(), fake.NewClientset(&resourceapi.DeviceClass{}))
	if err == nil || !strings.Contains(err.Error(), "no ResourceSlices") {
		t.Errorf("err = %v", err)
	}
}

func TestCheckPrintUpgraded(t *testing.T) {
	code, out, errOut := runCLI(t, "check", "--print-upgraded", "../../selectors/testdata/seeds/002-shared-gpu.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	objs, err := manifest.Decode([]byte(out))
	if err != nil || len(objs) != 3 {
		t.Fatalf("upgraded manifest: %v objects, %v\n%s", len(objs), err, out)
	}
	if strings.Contains(out, "v1alpha2") || strings.Contains(out, "source:") {
		t.Errorf("still old API:\n%s", out)
	}
	// VfioGpuClaimParameters become a request of the vfio class (issue 32).
	code, out, _ = runCLI(t, "check", "--print-upgraded", "../../selectors/testdata/seeds/002-vfio.yaml")
	if code != 0 || !strings.Contains(out, "deviceClassName: vfio.gpu.nvidia.com") || strings.Contains(out, "# error: ") {
		t.Errorf("vfio: exit %d, output %s", code, out)
	}
}

func TestTargetMachineHeader(t *testing.T) {
	cases := map[string]string{
		"# Seed 1\n# Target machine: dgx-a100-40gb (the default). Any machine.\napiVersion: v1\n": "dgx-a100-40gb",
		"# Target machine: dgx-a100-80gb --dynamic-mig.\n":                                        "dgx-a100-80gb --dynamic-mig",
		"# Target machine: l4x8\n---\napiVersion: v1\n":                                           "l4x8",
		"apiVersion: v1\n# Target machine: l4x8\n":                                                "",
	}
	for in, want := range cases {
		if got := targetMachine([]byte(in)); got != want {
			t.Errorf("targetMachine(%q) = %q, want %q", in, got, want)
		}
	}
	nf, err := parseTargetMachine("dgx-a100-40gb --mig-config all-balanced", "node-1")
	if err != nil || nf.machine != "dgx-a100-40gb" || nf.migConfig != "all-balanced" || nf.nodeName != "node-1" {
		t.Errorf("parseTargetMachine = %+v, %v", nf, err)
	}
	if _, err := parseTargetMachine("l4x8 --warp-drive", "n"); err == nil {
		t.Errorf("unknown flag accepted")
	}
}

// TestCheckComputeDomainExamples: NVIDIA's IMEX examples (examples/deploy/computedomain) are
// checked as a platform engineer expects: the ComputeDomain and its channel template are the
// driver's, the channel is allocated on a machine whose GPUs are in one NVLink clique
// (gb200-nvl4), and refused with the reason on one whose GPUs are in none (dgx-a100-40gb); a
// 4-node job gets one channel on a one-node machine and the others are said to need other nodes.
func TestCheckComputeDomainExamples(t *testing.T) {
	type claim struct {
		Claim, Result string
	}
	noClique := "no device of class compute-domain-default-channel.nvidia.com on this machine"
	otherNodes := "ComputeDomain training-domain spans 4 nodes (spec.numNodes), one channel per node"
	cases := []struct {
		machine, file string
		wantCode      int
		want          []claim
	}{
		{"gb200-nvl4", "01-imex-channel-injection.yaml", 0, []claim{{"default/imex-channel-0-1", "compute-domain.nvidia.com/channel-0"}}},
		{"dgx-a100-40gb", "01-imex-channel-injection.yaml", 1, []claim{{"default/imex-channel-0-1", noClique}}},
		{"gb200-nvl4", "02-multi-node-job.yaml", 1, []claim{
			{"default/training-domain-channel-1", "compute-domain.nvidia.com/channel-0"},
			{"default/training-domain-channel-2", otherNodes}, {"default/training-domain-channel-3", otherNodes}, {"default/training-domain-channel-4", otherNodes}}},
		{"dgx-a100-40gb", "02-multi-node-job.yaml", 1, []claim{
			{"default/training-domain-channel-1", noClique}, {"default/training-domain-channel-2", noClique},
			{"default/training-domain-channel-3", noClique}, {"default/training-domain-channel-4", noClique}}},
		{"gb200-nvl4", "deviceclasses.yaml", 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.machine+"/"+tc.file, func(t *testing.T) {
			code, out, errOut := runCLI(t, "check", "-o", "json", "--machine", tc.machine, "../deploy/computedomain/"+tc.file)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s\n%s", code, tc.wantCode, errOut, out)
			}
			co := decodeCheck(t, out)
			if len(co.Files) != 1 {
				t.Fatalf("%d reports, want 1", len(co.Files))
			}
			r := co.Files[0]
			for _, f := range r.Findings {
				if f.Severity != finding.SeverityInfo && f.Rule != finding.RuleMatchesNothing {
					t.Errorf("finding %v: the examples are valid ComputeDomain manifests", f)
				}
			}
			var got []claim
			for _, c := range r.Claims {
				res := ""
				for _, d := range c.Devices {
					res = d.Driver + "/" + d.Device
				}
				if len(c.Reasons) > 0 {
					res, _, _ = strings.Cut(c.Reasons[0], ":")
				}
				got = append(got, claim{c.Claim, res})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
		})
	}
}
