package gpudra_test

import (
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
)

// The attribute and capacity names of DESIGN.md's compatibility contract.
var (
	gpuAttrs = []string{"architecture", "brand", "cudaComputeCapability", "cudaDriverVersion", "driverVersion",
		"index", "minor", "productName", "resource.kubernetes.io/numaNode", "resource.kubernetes.io/pciBusID",
		"type", "uuid"}
	migAttrs = []string{"architecture", "brand", "cudaComputeCapability", "cudaDriverVersion", "driverVersion",
		"parentIndex", "parentUUID", "productName", "profile", "resource.kubernetes.io/numaNode",
		"resource.kubernetes.io/pciBusID", "type", "uuid"}
	gpuCaps = []string{"memory", "multiprocessors"}
	migCaps = []string{"copyEngines", "decoders", "encoders", "jpegEngines", "memory", "multiprocessors", "ofaEngines"}
)

func keys[V any](m map[resourceapi.QualifiedName]V) []string {
	var out []string
	for k := range m {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}

func attr(d resourceapi.Device, name string) string {
	a, ok := d.Attributes[resourceapi.QualifiedName(name)]
	switch {
	case !ok:
		return ""
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	}
	return "?"
}

func TestFullGPUsFollowTheContract(t *testing.T) {
	for _, machine := range []string{"l4x8", "dgx-a100-40gb", "dgx-h100", "a10gx4"} {
		t.Run(machine, func(t *testing.T) {
			inv := inventory(t, machine)
			devs := allDevices(slicesFor(t, inv))
			if len(devs) != len(inv.GPUs) {
				t.Fatalf("published %d devices for %d GPUs", len(devs), len(inv.GPUs))
			}
			for i, d := range devs {
				g := inv.GPUs[i]
				if want := gpudra.GPUDeviceName(g.Minor); d.Name != want {
					t.Errorf("device %d name = %q, want %q", i, d.Name, want)
				}
				if diff := cmp.Diff(gpuAttrs, keys(d.Attributes)); diff != "" {
					t.Errorf("%s attributes (-want +got):\n%s", d.Name, diff)
				}
				if diff := cmp.Diff(gpuCaps, keys(d.Capacity)); diff != "" {
					t.Errorf("%s capacity (-want +got):\n%s", d.Name, diff)
				}
				want := map[string]string{"type": "gpu", "uuid": g.UUID, "productName": g.ProductName,
					"resource.kubernetes.io/pciBusID": g.PCIBusID, "driverVersion": inv.DriverVersion}
				for k, v := range want {
					if got := attr(d, k); got != v {
						t.Errorf("%s attribute %s = %q, want %q", d.Name, k, got, v)
					}
				}
				mem := d.Capacity["memory"].Value
				if got := mem.Value(); uint64(got) != g.MemoryBytes {
					t.Errorf("%s memory = %d, want %d", d.Name, got, g.MemoryBytes)
				}
			}
		})
	}
}

func TestStaticMIGPublishesExactlyTheMIGDevices(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb", gputest.WithMIGAll("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"))
	devs := allDevices(slicesFor(t, inv))
	// Seed 001: all-balanced on a DGX A100 publishes 32 MIG devices and no full GPU.
	if len(devs) != 32 {
		t.Fatalf("published %d devices, want 32", len(devs))
	}
	count := map[string]int{}
	names := map[string]bool{}
	for _, d := range devs {
		if attr(d, "type") != "mig" {
			t.Fatalf("device %s has type %q; a MIG-enabled GPU must not publish itself", d.Name, attr(d, "type"))
		}
		if diff := cmp.Diff(migAttrs, keys(d.Attributes)); diff != "" {
			t.Errorf("%s attributes (-want +got):\n%s", d.Name, diff)
		}
		if diff := cmp.Diff(migCaps, keys(d.Capacity)); diff != "" {
			t.Errorf("%s capacity (-want +got):\n%s", d.Name, diff)
		}
		count[attr(d, "profile")]++
		names[d.Name] = true
	}
	if diff := cmp.Diff(map[string]int{"1g.5gb": 16, "2g.10gb": 8, "3g.20gb": 8}, count); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
	// NVML profile Ids on an A100-40GB: 1g.5gb = 19, 3g.20gb = 9; a 3g instance covers 4 slices.
	for _, want := range []string{"gpu-0-mig-1g5gb-19-0", "gpu-0-mig-1g5gb-19-1", "gpu-0-mig-2g10gb-14-2", "gpu-0-mig-3g20gb-9-4"} {
		if !names[want] {
			t.Errorf("device %s not published; have %v", want, sortedKeys(names))
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestMixedMachinePublishesGPUAndMIG(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb", gputest.WithMIG(0, "7g.40gb"))
	devs := allDevices(slicesFor(t, inv))
	if len(devs) != 8 {
		t.Fatalf("published %d devices, want 1 MIG + 7 GPUs", len(devs))
	}
	if got := attr(devs[0], "profile"); got != "7g.40gb" {
		t.Errorf("first device profile = %q, want 7g.40gb", got)
	}
	if got := attr(devs[1], "type"); got != "gpu" {
		t.Errorf("second device type = %q, want gpu", got)
	}
}

func TestSlicesAreChunkedWithinLimits(t *testing.T) {
	cases := []struct {
		name    string
		machine string
		opts    []gpudra.Option
		want    []int // devices per slice; counters-only slices are 0
	}{
		{"one slice", "l4x8", nil, []int{8}},
		{"chunked by option", "l4x8", []gpudra.Option{gpudra.WithMaxDevicesPerSlice(3)}, []int{3, 3, 2}},
		// Dynamic MIG on a DGX H100: 8 counter sets in one counters-only slice, then devices with
		// counter consumption at most 64 per slice.
		{"dynamic MIG", "dgx-h100", []gpudra.Option{gpudra.WithDynamicMIG(nil)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			slices := slicesFor(t, inventory(t, c.machine), c.opts...)
			var got []int
			total := 0
			for _, s := range slices {
				if s.Spec.Pool.ResourceSliceCount != int64(len(slices)) {
					t.Errorf("slice %s ResourceSliceCount = %d, want %d", s.Name, s.Spec.Pool.ResourceSliceCount, len(slices))
				}
				if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
					t.Errorf("slice %s has both devices and counters", s.Name)
				}
				if len(s.Spec.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
					t.Errorf("slice %s has %d counter sets", s.Name, len(s.Spec.SharedCounters))
				}
				limit := resourceapi.ResourceSliceMaxDevices
				for _, d := range s.Spec.Devices {
					if len(d.ConsumesCounters) > 0 || len(d.Taints) > 0 {
						limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
					}
					if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
						t.Errorf("device %s has %d attributes and capacities", d.Name, n)
					}
				}
				if len(s.Spec.Devices) > limit {
					t.Errorf("slice %s has %d devices, limit %d", s.Name, len(s.Spec.Devices), limit)
				}
				got = append(got, len(s.Spec.Devices))
				total += len(s.Spec.Devices)
			}
			if c.want != nil {
				if diff := cmp.Diff(c.want, got); diff != "" {
					t.Errorf("devices per slice (-want +got):\n%s", diff)
				}
			}
			if total == 0 {
				t.Error("no devices published")
			}
		})
	}
}

func TestDynamicMIGOnMachineWithoutMIGPublishesFullGPUsOnly(t *testing.T) {
	slices := slicesFor(t, inventory(t, "l4x8"), gpudra.WithDynamicMIG(nil))
	devs := allDevices(slices)
	if len(devs) != 8 {
		t.Fatalf("published %d devices, want 8 full GPUs", len(devs))
	}
	for _, s := range slices {
		if len(s.Spec.SharedCounters) > 0 {
			t.Errorf("slice %s publishes counters on a machine without MIG", s.Name)
		}
	}
	for _, d := range devs {
		if attr(d, "type") != "gpu" || len(d.ConsumesCounters) > 0 {
			t.Errorf("device %s: type %q, %d counter consumptions", d.Name, attr(d, "type"), len(d.ConsumesCounters))
		}
	}
}

func TestDynamicAndStaticNamesAgree(t *testing.T) {
	layout := []string{"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"}
	static := allDevices(slicesFor(t, inventory(t, "dgx-a100-40gb", gputest.WithMIGAll(layout...))))
	dynamic := map[string]bool{}
	for _, d := range allDevices(slicesFor(t, inventory(t, "dgx-a100-40gb"), gpudra.WithDynamicMIG(nil))) {
		dynamic[d.Name] = true
	}
	for _, d := range static {
		if !dynamic[d.Name] {
			t.Errorf("static MIG device %s has no dynamic device of the same name", d.Name)
		}
	}
}

func TestDeviceClassesSelectTheRightDevices(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb", gputest.WithMIG(0, "3g.20gb", "3g.20gb"))
	devs := allDevices(slicesFor(t, inv))
	classes := selectors.DeviceClasses(gpudra.DefaultDriverName)
	if diff := cmp.Diff([]string{"gpu.nvidia.com", "mig.nvidia.com"}, []string{classes[0].Name, classes[1].Name}); diff != "" {
		t.Fatalf("class names (-want +got):\n%s", diff)
	}
	compiler := cel.GetCompiler(cel.Features{})
	for _, class := range classes {
		expr := class.Spec.Selectors[0].CEL.Expression
		res := compiler.CompileCELExpression(expr, cel.Options{})
		if res.Error != nil {
			t.Fatalf("class %s: %v", class.Name, res.Error)
		}
		matched := 0
		for _, d := range devs {
			ok, _, err := res.DeviceMatches(t.Context(), cel.Device{Driver: gpudra.DefaultDriverName, Attributes: d.Attributes, Capacity: d.Capacity})
			if err != nil {
				t.Fatalf("class %s on %s: %v", class.Name, d.Name, err)
			}
			if ok {
				matched++
				if want := strings.TrimSuffix(class.Name, ".nvidia.com"); attr(d, "type") != want {
					t.Errorf("class %s matched %s of type %s", class.Name, d.Name, attr(d, "type"))
				}
			}
		}
		want := map[string]int{"gpu.nvidia.com": 7, "mig.nvidia.com": 2}[class.Name]
		if matched != want {
			t.Errorf("class %s matched %d devices, want %d", class.Name, matched, want)
		}
	}
}

func TestMIGDeviceNamesRoundTrip(t *testing.T) {
	cases := []struct {
		minor, id, start int
		profile, ci      string
		want             string
	}{
		{0, 19, 0, "1g.5gb", "", "gpu-0-mig-1g5gb-19-0"},
		{7, 20, 6, "1g.10gb+me", "", "gpu-7-mig-1g10gb-me-20-6"},
		{3, 15, 0, "1g.24gb+me.all", "", "gpu-3-mig-1g24gb-meall-15-0"},
		{1, 9, 4, "3g.20gb", "ci2", "gpu-1-mig-3g20gb-9-4-ci2"},
	}
	for _, c := range cases {
		got := gpudra.MIGDeviceName(gpudra.MIGName{ParentMinor: c.minor, Profile: c.profile, GIProfileID: c.id, PlacementStart: c.start, CISuffix: c.ci})
		if got != c.want {
			t.Errorf("MIGDeviceName(%d, %s, %d, %d, %q) = %q, want %q", c.minor, c.profile, c.id, c.start, c.ci, got, c.want)
		}
		n, err := gpudra.ParseMIGDeviceName(got)
		if err != nil {
			t.Fatalf("ParseMIGDeviceName(%q): %v", got, err)
		}
		if n.ParentMinor != c.minor || n.GIProfileID != c.id || n.PlacementStart != c.start || n.CISuffix != c.ci {
			t.Errorf("ParseMIGDeviceName(%q) = %+v", got, n)
		}
	}
	if _, err := gpudra.ParseMIGDeviceName("gpu-0"); err == nil {
		t.Error("ParseMIGDeviceName accepted a full-GPU name")
	}
}

// TestComputeInstanceNames: a MIG device that is a compute instance smaller than its GPU
// instance is named after the GPU-instance profile plus a compute-instance suffix.
func TestComputeInstanceNames(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb", gputest.WithMIG(0, "1c.3g.20gb", "2c.3g.20gb"))
	var names []string
	for _, d := range allDevices(slicesFor(t, inv)) {
		if attr(d, "type") == "mig" {
			names = append(names, d.Name)
		}
	}
	if len(names) != 2 {
		t.Fatalf("published %d MIG devices, want 2: %v", len(names), names)
	}
	seen := map[string]bool{}
	for _, n := range names {
		parsed, err := gpudra.ParseMIGDeviceName(n)
		if err != nil {
			t.Fatal(err)
		}
		// The name carries the GPU-instance profile, as dynamic MIG names do, plus a CI suffix.
		if parsed.Profile != "3g20gb" || !strings.HasPrefix(parsed.CISuffix, "ci") || seen[n] {
			t.Errorf("name %s: parsed %+v (duplicate: %v)", n, parsed, seen[n])
		}
		seen[n] = true
	}
}
