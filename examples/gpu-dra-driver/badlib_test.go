package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	selcheck "github.com/gpudra/gpudra/selectors/check"
	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/sharing/v1beta1"
	"github.com/gpudra/gpudra/simulate"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// libCase is one call into the library with a bad (or borderline) input: it must return, never
// panic, and its error must contain err ("" for no error).
type libCase struct {
	name string
	call func() error
	err  string
}

// libFixture holds what the library cases call into.
type libFixture struct {
	a100 *mig.Model
	inv  *gpu.Inventory
	topo *topology.Topology
	sim  func() *simulate.Simulator
}

func newLibFixture(t *testing.T) libFixture {
	t.Helper()
	ctx := context.Background()
	a100, err := mig.Lookup("A100-SXM4-40GB")
	if err != nil {
		t.Fatal(err)
	}
	m, err := gputest.New("l4x8")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmlgpu.Enumerate(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatal(err)
	}
	b := gpudra.NewBuilder()
	pool, err := b.Build("node-1", inv)
	if err != nil {
		t.Fatal(err)
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), "node-1", pool)
	if err != nil {
		t.Fatal(err)
	}
	classes := selectors.DeviceClasses(b.DriverName())
	return libFixture{a100: a100, inv: inv, topo: topo, sim: func() *simulate.Simulator { return simulate.New("node-1", classes, slices) }}
}

func libClaim(mode resourceapi.DeviceAllocationMode, count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: mode, Count: count}}}}}}
}

func (fx libFixture) allocate(claim *resourceapi.ResourceClaim) func() error {
	return func() error { _, err := fx.sim().Allocate(context.Background(), claim); return err }
}

func (fx libFixture) build(c gpudra.ConsumableMemory) func() error {
	return func() error {
		_, err := gpudra.NewBuilder(gpudra.WithConsumableMemory(c)).Build("n", fx.inv)
		return err
	}
}

func (fx libFixture) cases() []libCase {
	ctx := context.Background()
	check := func(manifest string) func() error {
		return func() error {
			r, err := selcheck.NewChecker().Check(ctx, "m", []byte(manifest))
			if err != nil || r.OK() {
				return err
			}
			return fmt.Errorf("not OK: %v", r.Findings)
		}
	}
	layout := func(s string) func() error { _, err := mig.ParseLayout(s); return func() error { return err } }
	validate := func(in ...mig.Instance) func() error {
		return func() error { _, err := mig.Validate(fx.a100, in); return err }
	}
	bestSet := func(n int, cand []int) func() error {
		return func() error { _, err := topology.BestSet(fx.topo, n, cand); return err }
	}
	policy := func(s string) func() error {
		return func() error { _, err := lint.ParsePolicy([]byte(s)); return err }
	}
	config := func(s string) func() error { return func() error { _, err := mig.ParseConfig([]byte(s)); return err } }
	decode := func(s string) func() error {
		return func() error { _, err := v1beta1.NewDecoder().Decode([]byte(s)); return err }
	}
	return []libCase{
		{"simulate: nil claim", fx.allocate(nil), "nil claim"},
		{"simulate: count -3", fx.allocate(libClaim("", -3)), "exactly.count: Invalid value: -3: must be greater than zero"},
		{"simulate: count min int64", fx.allocate(libClaim("", -1<<63)), "must be greater than zero"},
		{"simulate: count 0 defaults to 1", fx.allocate(libClaim("", 0)), ""},
		{"simulate: count 8 of 8", fx.allocate(libClaim("", 8)), ""},
		{"simulate: count 9 of 8", fx.allocate(libClaim("", 9)), "cannot be allocated"},
		{"simulate: count 33", fx.allocate(libClaim("", 33)), "an allocation holds at most 32 devices"},
		{"simulate: count max int64", fx.allocate(libClaim("", 1<<63-1)), "an allocation holds at most 32 devices"},
		{"simulate: All with count", fx.allocate(libClaim(resourceapi.DeviceAllocationModeAll, 1)), "must not be set when allocationMode is All"},
		{"simulate: All", fx.allocate(libClaim(resourceapi.DeviceAllocationModeAll, 0)), ""},
		{"simulate: unknown mode", fx.allocate(libClaim("Most", 1)), `Unsupported value: "Most"`},
		{"simulate: empty request", fx.allocate(&resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "r"}}}}}), "Required value: exactly or firstAvailable"},
		{"simulate: ValidateRequests nil", func() error { return simulate.ValidateRequests(nil) }, "nil claim"},
		{"simulate: LoadWorkload nil", func() error { _, err := simulate.LoadWorkload(nil, nil); return err }, ""},
		{"simulate: LoadWorkload binary", func() error { _, err := simulate.LoadWorkload([]byte("\x00\x01"), nil); return err }, "document 0"},
		{"simulate: LoadWorkload field in other case", func() error {
			_, err := simulate.LoadWorkload([]byte("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nSpec: {}\n"), nil)
			return err
		}, `unknown field "Spec"`},
		{"selectors: Check nil manifest", check(""), "[empty]"},
		{"selectors: Check binary", check("\x00"), "control characters are not allowed"},
		{"selectors: Check count -3", check(claimYAML("c", "", "count: -3")), "[invalid-request]"},
		{"selectors: Check v1beta1", check("apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: c}\n"), "[not-served]"},
		{"selectors: Check unknown kind", check("apiVersion: v1\nkind: Pood\nmetadata: {name: c}\n"), "[unknown-kind]"},
		{"selectors: Check bad name", check(claimYAML("A_B", "", "count: 1")), "[invalid-name]"},
		{"selectors: Check ok", check(claimYAML("c", "", "count: 1")), ""},
		{"selectors: ParsePolicy empty", policy(""), ""},
		{"selectors: ParsePolicy other case", policy("maxGpusPerClaim: 1"), `unknown field "maxGpusPerClaim"`},
		{"selectors: ParsePolicy negative max", policy("maxGPUsPerClaim: -1"), "must not be negative"},
		{"selectors: ParsePolicy bad pattern", policy("blockedMIGProfiles: ['[']"), "blockedMIGProfiles"},
		{"selectors: ParsePolicy binary", policy("\x00"), "policy: "},
		{"selectors: ParseAPIVersions empty", func() error { _, err := selcheck.ParseAPIVersions([]string{""}); return err }, "want GROUP/VERSION"},
		{"selectors: ParseAPIVersions too many slashes", func() error { _, err := selcheck.ParseAPIVersions([]string{"a/b/c"}); return err }, "want GROUP/VERSION"},
		{"selectors: ParseAPIVersions bad group", func() error { _, err := selcheck.ParseAPIVersions([]string{"A B/v1"}); return err }, "want GROUP/VERSION"},
		{"selectors: ParseAPIVersions core", func() error { _, err := selcheck.ParseAPIVersions([]string{"v1"}); return err }, ""},
		{"selectors: DecodeManifest nil", func() error { _, err := manifest.Decode(nil); return err }, ""},
		{"selectors: Compile empty", func() error { _, err := selectors.NewCompiler().Compile(""); return err }, `CEL selector "": 1:0: Syntax error`},
		{"selectors: Compile with cache size -1", func() error { _, err := selectors.NewCompiler(selectors.WithCacheSize(-1)).Compile("true"); return err }, ""},
		{"mig: ParseLayout empty", layout(""), "empty layout"},
		{"mig: ParseLayout empty entry", layout("1g.5gb,,"), "layout entry 2 is empty"},
		{"mig: ParseLayout negative placement", layout("1g.5gb@-1"), "is not a memory-slice index"},
		{"mig: ParseLayout huge placement", layout("1g.5gb@99999999999999999999"), "is not a memory-slice index"},
		{"mig: Validate nil model", func() error { _, err := mig.Validate(nil, nil); return err }, "nil"},
		{"mig: Validate empty layout", validate(), ""},
		{"mig: Validate negative placement", validate(mig.At("1g.5gb", -1)), "placement"},
		{"mig: Validate placement past the GPU", validate(mig.At("1g.5gb", 1000)), "placement"},
		{"mig: Validate empty profile", validate(mig.Instance{}), "profile"},
		{"mig: Layouts nil model", func() error { _, err := mig.Layouts(nil); return err }, "nil"},
		{"mig: Layouts unknown profile", func() error { _, err := mig.Layouts(fx.a100, mig.WithProfiles("9g.9gb")); return err }, "9g.9gb"},
		{"mig: Layouts empty profile", func() error { _, err := mig.Layouts(fx.a100, mig.WithProfiles("")); return err }, "profile"},
		{"mig: CheckConfig nil spec", func() error { _, err := mig.CheckConfig(nil, "x", nil); return err }, "nil *ConfigSpec"},
		{"mig: ParseConfig empty", config(""), "missing required field version"},
		{"mig: ParseConfig other case", config("Version: v1"), `unknown field "Version"`},
		{"mig: ParseConfig negative count", config("version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.5gb: -2}\n"), "1g.5gb"},
		{"mig: ParseConfig negative device", config("version: v1\nmig-configs:\n  a:\n  - devices: [-1]\n    mig-enabled: false\n"), "-1"},
		{"mig: Plan nil model", func() error { _, err := mig.Plan(nil, nil, []string{"1g.5gb"}); return err }, "nil"},
		{"mig: Plan empty request", func() error { _, err := mig.Plan(fx.a100, nil, []string{""}); return err }, "profile"},
		{"mig: Plan nothing", func() error { _, err := mig.Plan(fx.a100, nil, nil); return err }, ""},
		{"mig: Plan on a bad layout", func() error {
			_, err := mig.Plan(fx.a100, []mig.Instance{mig.At("1g.5gb", -1)}, []string{"1g.5gb"})
			return err
		}, "placement"},
		{"mig: Candidates nil model", func() error { _, err := mig.Candidates(nil, nil, "1g.5gb"); return err }, "nil"},
		{"mig: Candidates unknown profile", func() error { _, err := mig.Candidates(fx.a100, nil, "9g.9gb"); return err }, "9g.9gb"},
		{"mig: PlacementCost negative start", func() error {
			_, _, err := mig.PlacementCost(fx.a100, nil, "1g.5gb", mig.Placement{Start: -1, Size: 1})
			return err
		}, "placement"},
		{"mig: PlacementCost zero size", func() error {
			_, _, err := mig.PlacementCost(fx.a100, nil, "1g.5gb", mig.Placement{Start: 0, Size: 0})
			return err
		}, "placement"},
		{"mig: PlacementOrder empty profile", func() error { _, err := mig.PlacementOrder(fx.a100, nil, ""); return err }, "profile"},
		{"mig: NewRanker nil", func() error { _, err := mig.NewRanker(nil); return err }, "nil"},
		{"mig: Lookup empty", func() error { _, err := mig.Lookup(""); return err }, "unknown"},
		{"mig: ParseProfile empty", func() error { _, err := mig.ParseProfile(""); return err }, "profile"},
		{"gputest: WithMIGConfig /dev/zero", func() error { _, err := gputest.New("dgx-a100-40gb", gputest.WithMIGConfig("/dev/zero")); return err },
			"/dev/zero: larger than the 1 MiB limit"},
		{"gputest: WithMIGConfigFile /dev/zero", func() error {
			_, err := gputest.New("dgx-a100-40gb", gputest.WithMIGConfigFile("/dev/zero", "x"))
			return err
		}, "/dev/zero: larger than the 1 MiB limit"},
		{"gputest: WithMIGConfig empty", func() error { _, err := gputest.New("dgx-a100-40gb", gputest.WithMIGConfig("")); return err }, "empty name"},
		{"gputest: unknown machine", func() error { _, err := gputest.New(""); return err }, "machine"},
		{"topology: BestSet nil", func() error { _, err := topology.BestSet(nil, 1, nil); return err }, "nil *Topology"},
		{"topology: BestSet -1", bestSet(-1, nil), "-1"},
		{"topology: BestSet 0", bestSet(0, nil), "cannot choose 0 GPUs from 8 candidates"},
		{"topology: BestSet more than GPUs", bestSet(9, nil), "9"},
		{"topology: BestSet bad candidate", bestSet(1, []int{-1}), "candidate -1 is not a GPU index"},
		{"topology: BestSet duplicate candidate", bestSet(2, []int{1, 1}), "1"},
		{"gpudra: Build nil inventory", func() error { _, err := gpudra.NewBuilder().Build("n", nil); return err }, "nil"},
		{"gpudra: Build empty pool name", func() error { _, err := gpudra.NewBuilder().Build("", fx.inv); return err }, "pool"},
		{"gpudra: Build max devices 0", func() error {
			_, err := gpudra.NewBuilder(gpudra.WithMaxDevicesPerSlice(0)).Build("n", fx.inv)
			return err
		}, ""},
		{"gpudra: Build max devices -1", func() error {
			_, err := gpudra.NewBuilder(gpudra.WithMaxDevicesPerSlice(-1)).Build("n", fx.inv)
			return err
		},
			"WithMaxDevicesPerSlice(-1): want a positive number of devices"},
		{"gpudra: Build negative memory step", fx.build(gpudra.ConsumableMemory{Step: resource.MustParse("-1Gi")}), "Step -1Gi: must not be negative"},
		{"gpudra: Build negative memory default", fx.build(gpudra.ConsumableMemory{Default: resource.MustParse("-1")}), "Default -1: must not be negative"},
		{"gpudra: Build tiny memory step", fx.build(gpudra.ConsumableMemory{Step: resource.MustParse("1m")}), ""},
		{"gpudra: ResourceSlices nil pool", func() error { _, err := gpudra.ResourceSlices("gpu.nvidia.com", "n", nil); return err }, "nil"},
		{"gpudra: ValidateNodeName empty", func() error { return gpudra.ValidateNodeName("") }, "node name is empty"},
		{"sharing: Decode empty", decode(""), "empty configuration"},
		{"sharing: Decode over the opaque limit", decode("{" + strings.Repeat(" ", 10<<10) + "}"), "over the 10 KiB limit of opaque parameters"},
		{"sharing: Decode binary", decode("\x00"), "control characters are not allowed"},
		{"sharing: Decode field in other case", decode(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","Sharing":{}}`), "Sharing"},
	}
}

// TestLibraryBadInput: the public entry points a user feeds return errors that say what is
// wrong, and never panic.
func TestLibraryBadInput(t *testing.T) {
	fx := newLibFixture(t)
	for _, c := range fx.cases() {
		t.Run(c.name, func(t *testing.T) {
			got := callNoPanic(c.call)
			first, _, _ := strings.Cut(got, "\n")
			want := first
			if c.err == "" && got != "" || c.err != "" && !strings.Contains(first, c.err) {
				want = "… " + c.err + " …"
			}
			if diff := cmp.Diff(want, first); diff != "" {
				t.Errorf("first line of the error (-want +got):\n%s", diff)
			}
		})
	}
}

// callNoPanic calls f and returns its error's text ("" for none), or "panic: ..." when it panics.
func callNoPanic(f func() error) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprintf("panic: %v", r)
		}
	}()
	if err := f(); err != nil {
		return err.Error()
	}
	return ""
}
