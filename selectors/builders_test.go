package selectors_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/examples/deploy"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/simulate"
)

func mustExpr(t *testing.T) func(string, error) string {
	return func(e string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

// TestBuildersOnFakeMachines compiles every builder's output and evaluates it on every device of
// every test machine; the expected result comes from reading the device's attributes in Go.
func TestBuildersOnFakeMachines(t *testing.T) {
	b := selectors.For("")
	must := mustExpr(t)
	isGPU := func(d *selectors.Device) bool { return seltest.StringAttr(d, gpudra.AttrType) == "gpu" }
	isMIG := func(d *selectors.Device) bool { return seltest.StringAttr(d, gpudra.AttrType) == "mig" }
	cases := []struct {
		name string
		expr string
		want func(d *selectors.Device) bool
	}{
		{"gpu", b.GPU(), isGPU},
		{"mig", b.MIG(), isMIG},
		{"driver", b.IsDriver(), func(*selectors.Device) bool { return true }},
		{"one profile", selectors.And(b.MIG(), must(b.Profiles("1g.10gb"))), func(d *selectors.Device) bool {
			return isMIG(d) && seltest.StringAttr(d, gpudra.AttrProfile) == "1g.10gb"
		}},
		{"profiles", selectors.And(b.MIG(), must(b.Profiles("1g.5gb", "3g.40gb"))), func(d *selectors.Device) bool {
			p := seltest.StringAttr(d, gpudra.AttrProfile)
			return isMIG(d) && (p == "1g.5gb" || p == "3g.40gb")
		}},
		{"product glob", must(b.ProductName("*a100*80gb*")), func(d *selectors.Device) bool {
			p := strings.ToLower(seltest.StringAttr(d, gpudra.AttrProductName))
			return strings.Contains(p, "a100") && strings.Contains(p[strings.Index(p, "a100"):], "80gb")
		}},
		{"product suffix glob", must(b.ProductName("*80GB")), func(d *selectors.Device) bool {
			return strings.HasSuffix(strings.ToLower(seltest.StringAttr(d, gpudra.AttrProductName)), "80gb")
		}},
		{"product exact", must(b.ProductName("NVIDIA L4")), func(d *selectors.Device) bool { return seltest.StringAttr(d, gpudra.AttrProductName) == "NVIDIA L4" }},
		{"architecture", must(b.Architecture("Hopper", "Blackwell")), func(d *selectors.Device) bool {
			a := seltest.StringAttr(d, gpudra.AttrArchitecture)
			return a == "Hopper" || a == "Blackwell"
		}},
		{"compute capability", must(b.MinComputeCapability("8.6")), func(d *selectors.Device) bool {
			return seltest.VersionAttr(d, gpudra.AttrCudaComputeCapability).GTE(semver.MustParse("8.6.0"))
		}},
		{"driver range", must(b.DriverVersion("550", "580.126.09")), func(d *selectors.Device) bool {
			v := seltest.VersionAttr(d, gpudra.AttrDriverVersion)
			return v.GTE(semver.MustParse("550.0.0")) && v.LT(semver.MustParse("580.126.9"))
		}},
		{"driver min", must(b.DriverVersion("580.126.09", "")), func(d *selectors.Device) bool {
			return seltest.VersionAttr(d, gpudra.AttrDriverVersion).GTE(semver.MustParse("580.126.9"))
		}},
		{"cuda max", must(b.CUDADriverVersion("", "13.0")), func(d *selectors.Device) bool {
			return seltest.VersionAttr(d, gpudra.AttrCudaDriverVersion).LT(semver.MustParse("13.0.0"))
		}},
		{"min memory", b.MinMemory(resource.MustParse("40Gi")), func(d *selectors.Device) bool {
			m := seltest.Memory(d)
			return m.Cmp(resource.MustParse("40Gi")) >= 0
		}},
		{"max memory", b.MaxMemory(resource.MustParse("10Gi")), func(d *selectors.Device) bool {
			m := seltest.Memory(d)
			return m.Cmp(resource.MustParse("10Gi")) <= 0
		}},
		{"or", selectors.Or(b.MIG(), must(b.Architecture("Ada Lovelace"))), func(d *selectors.Device) bool {
			return isMIG(d) || seltest.StringAttr(d, gpudra.AttrArchitecture) == "Ada Lovelace"
		}},
		{"not", selectors.Not(b.GPU()), func(d *selectors.Device) bool { return !isGPU(d) }},
	}
	c := selectors.NewCompiler()
	ctx := context.Background()
	machines := seltest.Machines()
	var devices []*selectors.Device
	for _, m := range machines {
		devices = append(devices, m.Devices(t)...)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := c.Compile(tc.expr)
			if err != nil {
				t.Fatalf("Compile(%s): %v", tc.expr, err)
			}
			matched := 0
			for _, d := range devices {
				got, err := sel.Matches(ctx, d)
				if err != nil {
					t.Fatalf("%s on %s: %v", tc.expr, d.Name(), err)
				}
				if want := tc.want(d); got != want {
					t.Errorf("%s on %s (%s): got %v, want %v", tc.expr, d.Name(), seltest.StringAttr(d, gpudra.AttrProductName), got, want)
				}
				if got {
					matched++
				}
			}
			if matched == 0 || (matched == len(devices) && tc.name != "driver") {
				t.Errorf("%s matched %d of %d devices: the case tests nothing", tc.expr, matched, len(devices))
			}
		})
	}
}

func TestBuilderErrors(t *testing.T) {
	b := selectors.For("")
	cases := []struct {
		name string
		err  func() error
		want string
	}{
		{"no profile", func() error { _, err := b.Profiles(); return err }, "at least one MIG profile"},
		{"bad profile", func() error { _, err := b.Profiles("1g.5gb", "3g40gb"); return err }, "profiles[1]"},
		{"no architecture", func() error { _, err := b.Architecture(); return err }, "at least one name"},
		{"empty glob", func() error { _, err := b.ProductName(""); return err }, "empty pattern"},
		{"bad version", func() error { _, err := b.MinComputeCapability("eight"); return err }, `"eight" is not a number`},
		{"no bounds", func() error { _, err := b.DriverVersion("", ""); return err }, "a minimum or a maximum"},
		{"too many parts", func() error { _, err := b.CUDADriverVersion("1.2.3.4", ""); return err }, "MAJOR[.MINOR[.PATCH]]"},
	}
	for _, tc := range cases {
		err := tc.err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

// TestDeviceClassesMatchTheShippedManifest: the classes the driver publishes are the ones
// examples/deploy/deviceclasses.yaml ships (the compatibility contract's selectors).
func TestDeviceClassesMatchTheShippedManifest(t *testing.T) {
	data, err := fs.ReadFile(deploy.Files, "deviceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []*resourceapi.DeviceClass
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
	for {
		c := &resourceapi.DeviceClass{}
		if err := dec.Decode(c); err != nil {
			break
		}
		want = append(want, c)
	}
	if diff := cmp.Diff(want, selectors.DeviceClasses("")); diff != "" {
		t.Errorf("DeviceClasses (-deviceclasses.yaml +got):\n%s", diff)
	}
	other := selectors.DeviceClasses("gpu.example.com")
	if other[0].Name != "gpu.gpu.example.com" || other[1].Spec.Selectors[0].CEL.Expression != "device.driver == 'gpu.example.com' && device.attributes['gpu.example.com'].type == 'mig'" {
		t.Errorf("classes for another driver: %s %q", other[0].Name, other[1].Spec.Selectors[0].CEL.Expression)
	}
}

func TestConstraints(t *testing.T) {
	got := []resourceapi.DeviceConstraint{
		selectors.SamePCIeRoot("a", "b"),
		selectors.SameNUMANode(),
		selectors.For("").SameParentGPU("x"),
		selectors.For("").SameNVLinkIsland("g"),
		selectors.For("gpu.example.com").SameNVLinkDomain(),
	}
	attr := func(s string) *resourceapi.FullyQualifiedName { a := resourceapi.FullyQualifiedName(s); return &a }
	want := []resourceapi.DeviceConstraint{
		{Requests: []string{"a", "b"}, MatchAttribute: attr("resource.kubernetes.io/pcieRoot")},
		{MatchAttribute: attr("resource.kubernetes.io/numaNode")},
		{Requests: []string{"x"}, MatchAttribute: attr("gpu.nvidia.com/parentUUID")},
		{Requests: []string{"g"}, MatchAttribute: attr("gpu.nvidia.com/nvlinkIsland")},
		{MatchAttribute: attr("gpu.example.com/nvlinkDomain")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("constraints (-want +got):\n%s", diff)
	}
}

func TestNormalizeVersion(t *testing.T) {
	cases := map[string]string{"580.126.09": "580.126.9", "8.0": "8.0.0", "v12": "12.0.0", "1.2.3-rc.1": "1.2.3-rc.1", "7.5": "7.5.0"}
	for in, want := range cases {
		got, err := selectors.NormalizeVersion(in)
		if err != nil || got != want {
			t.Errorf("NormalizeVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x.1", "1..2", "1.2.3.4"} {
		if _, err := selectors.NormalizeVersion(bad); err == nil {
			t.Errorf("NormalizeVersion(%q) accepted", bad)
		}
	}
}

// TestQuotingSurvivesHostileInput: builder output stays one string literal whatever the input.
func TestQuotingSurvivesHostileInput(t *testing.T) {
	c := selectors.NewCompiler()
	for _, in := range []string{`it's`, `a\b`, "new\nline", `' || true || '`, "\x00\x7f"} {
		e, err := selectors.For("").Architecture(in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Compile(e); err != nil {
			t.Errorf("Architecture(%q) = %s does not compile: %v", in, e, err)
		}
		g, _ := selectors.For("").ProductName(in)
		if _, err := c.Compile(g); err != nil {
			t.Errorf("ProductName(%q) = %s does not compile: %v", in, g, err)
		}
	}
}

// TestConstraintsOnFakeMachines: claims built with the constraint helpers allocate devices that
// share the attribute, on machines where the topology allows it, and do not fit where it does
// not (each H100 has its own PCIe root).
func TestConstraintsOnFakeMachines(t *testing.T) {
	b := selectors.For("")
	claim := func(count int64, c resourceapi.DeviceConstraint, class string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "00000000-0000-4000-8000-000000000001"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests:    []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Count: count}}},
				Constraints: []resourceapi.DeviceConstraint{c},
			}}}
	}
	cases := []struct {
		name  string
		on    seltest.Machine
		claim *resourceapi.ResourceClaim
		attr  resourceapi.QualifiedName
		fits  bool
	}{
		{"4 GPUs on one NUMA node", seltest.Machine{Name: "dgx-h100"}, claim(4, selectors.SameNUMANode(), "gpu.nvidia.com"), gpudra.StdAttrNUMANode, true},
		{"5 GPUs on one NUMA node", seltest.Machine{Name: "dgx-h100"}, claim(5, selectors.SameNUMANode(), "gpu.nvidia.com"), gpudra.StdAttrNUMANode, false},
		{"a GPU pair under one PCIe root", seltest.Machine{Name: "dgx-a100-40gb"}, claim(2, selectors.SamePCIeRoot("r"), "gpu.nvidia.com"), gpudra.StdAttrPCIeRoot, true},
		{"no pair under one root on H100", seltest.Machine{Name: "dgx-h100"}, claim(2, selectors.SamePCIeRoot("r"), "gpu.nvidia.com"), gpudra.StdAttrPCIeRoot, false},
		{"4 MIG devices of one GPU", seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}, claim(4, b.SameParentGPU(), "mig.nvidia.com"), gpudra.AttrParentUUID, true},
		{"5 MIG devices of one GPU", seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}, claim(5, b.SameParentGPU(), "mig.nvidia.com"), gpudra.AttrParentUUID, false},
		// NVIDIA's systems: every GPU of a DGX on one NVSwitch island; A30 pairs on NVLink bridges;
		// L4 servers PCIe only; GB200 trays in one fabric domain, DGX H100 in none.
		{"8 GPUs on one NVLink island", seltest.Machine{Name: "dgx-b200"}, claim(8, b.SameNVLinkIsland(), "gpu.nvidia.com"), gpudra.AttrNVLinkIsland, true},
		{"a bridged A30 pair", seltest.Machine{Name: "a30x4"}, claim(2, b.SameNVLinkIsland(), "gpu.nvidia.com"), gpudra.AttrNVLinkIsland, true},
		{"no bridged A30 triple", seltest.Machine{Name: "a30x4"}, claim(3, b.SameNVLinkIsland(), "gpu.nvidia.com"), gpudra.AttrNVLinkIsland, false},
		{"no island on L4", seltest.Machine{Name: "l4x8"}, claim(2, b.SameNVLinkIsland(), "gpu.nvidia.com"), gpudra.AttrNVLinkIsland, false},
		{"4 GB200 GPUs in one fabric domain", seltest.Machine{Name: "gb200-nvl4"}, claim(4, b.SameNVLinkDomain(), "gpu.nvidia.com"), gpudra.AttrNVLinkDomain, true},
		{"no fabric domain on H100", seltest.Machine{Name: "dgx-h100"}, claim(1, b.SameNVLinkDomain(), "gpu.nvidia.com"), gpudra.AttrNVLinkDomain, false},
		{"MIG devices carry their GPU's island", seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}, claim(20, b.SameNVLinkIsland(), "mig.nvidia.com"), gpudra.AttrNVLinkIsland, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			slices := tc.on.Slices(t)
			sim := simulate.New(seltest.Node, selectors.DeviceClasses(""), slices)
			got, err := sim.Allocate(context.Background(), tc.claim)
			if !tc.fits {
				if !errors.Is(err, simulate.ErrUnschedulable) {
					t.Fatalf("Allocate = %v, want unschedulable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]*selectors.Device{}
			for _, d := range selectors.DevicesFromSlices(slices) {
				byName[d.Name()] = d
			}
			values := map[string]bool{}
			for _, r := range got.Status.Allocation.Devices.Results {
				a, _ := byName[r.Device].Attribute(tc.attr)
				values[fmt.Sprint(ptr.Deref(a.StringValue, ""), ptr.Deref(a.IntValue, -1))] = true
			}
			if len(values) != 1 || len(got.Status.Allocation.Devices.Results) != int(tc.claim.Spec.Devices.Requests[0].Exactly.Count) {
				t.Errorf("devices %v have %s values %v, want one", got.Status.Allocation.Devices.Results, tc.attr, values)
			}
		})
	}
}

func TestGPUClaim(t *testing.T) {
	b := selectors.For("")
	got, err := b.GPUClaim("gpus", 4, b.SameNVLinkIsland, selectors.SameNUMANode)
	if err != nil {
		t.Fatal(err)
	}
	attr := func(s string) *resourceapi.FullyQualifiedName { a := resourceapi.FullyQualifiedName(s); return &a }
	want := resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4}}},
		Constraints: []resourceapi.DeviceConstraint{
			{Requests: []string{"gpus"}, MatchAttribute: attr("gpu.nvidia.com/nvlinkIsland")},
			{Requests: []string{"gpus"}, MatchAttribute: attr("resource.kubernetes.io/numaNode")},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUClaim (-want +got):\n%s", diff)
	}
	other, err := selectors.For("gpu.example.com").GPUClaim("r", 1)
	if err != nil || other.Requests[0].Exactly.DeviceClassName != "gpu.gpu.example.com" || other.Constraints != nil {
		t.Errorf("another driver: %+v, %v", other, err)
	}
	for _, bad := range []struct {
		name string
		n    int64
		c    []selectors.ConstraintFunc
	}{{"Gpus", 2, nil}, {"", 2, nil}, {"gpus", 0, nil}, {"gpus", 33, nil}, {"gpus", 2, []selectors.ConstraintFunc{nil}}} {
		if _, err := b.GPUClaim(bad.name, bad.n, bad.c...); err == nil {
			t.Errorf("GPUClaim(%q, %d, %d constraints) accepted", bad.name, bad.n, len(bad.c))
		}
	}
}
