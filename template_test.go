package gpudra_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// withoutNodeSpecifics is what an autoscaler may know of a node before it exists, written
// from the list of node-specific fields (names, hardware identities, node software, health),
// not from SliceTemplates.
func withoutNodeSpecifics(published []*resourceapi.ResourceSlice, node string) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, s := range published {
		s = s.DeepCopy()
		s.Name = strings.Replace(s.Name, node, gpudra.TemplateNodeName, 1)
		s.Spec.NodeName = new(gpudra.TemplateNodeName)
		s.Spec.Pool.Name = gpudra.TemplateNodeName
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			for _, a := range []resourceapi.QualifiedName{"uuid", "parentUUID", "resource.kubernetes.io/pciBusID", "driverVersion", "cudaDriverVersion"} {
				delete(d.Attributes, a)
			}
			d.Taints = nil
		}
		out = append(out, s)
	}
	return out
}

// TestSliceTemplatesEqualWhatThePluginPublishes: for several GPU types, the templates equal
// what the node-runtime plugin publishes on a fresh node of that type apart from node-specific
// fields, contain no value that identifies the node or its hardware, and let the scheduler's
// allocator place the seed claims of that type as on the real node.
func TestSliceTemplatesEqualWhatThePluginPublishes(t *testing.T) {
	cases := []struct {
		machine string
		machOpt []gputest.Option
		slices  []gpudra.Option
		claim   *resourceapi.ResourceClaim
	}{
		{"dgx-a100-40gb", []gputest.Option{gputest.WithMIGConfig("all-balanced")}, nil,
			draplugintest.Claim("mig", gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'", "")},
		{"dgx-h100", nil, []gpudra.Option{gpudra.WithDynamicMIG(nil)},
			draplugintest.Claim("partition", gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'", "")},
		{"l4x8", nil, []gpudra.Option{gpudra.WithConsumableMemory(gpudra.ConsumableMemory{})},
			draplugintest.Claim("l4", gpudra.GPUDeviceClassName, "device.attributes['gpu.nvidia.com'].productName.contains('L4')", "")},
		{"gb200-nvl4", nil, nil, draplugintest.Claim("gb200", gpudra.GPUDeviceClassName, "", "")},
	}
	for _, tc := range cases {
		t.Run(tc.machine, func(t *testing.T) {
			ctx := context.Background()
			_, topo := inventoryAndTopology(t, tc.machine, tc.machOpt...)
			sliceOpts := append([]gpudra.Option{gpudra.WithPCIeRoot(topo.PCIeRoot)}, tc.slices...)
			node, err := draplugintest.NewNode(tc.machine, draplugintest.WithNodeName("gpu-node-17"),
				draplugintest.WithMachineOptions(tc.machOpt...), draplugintest.WithSliceOptions(sliceOpts...))
			if err != nil {
				t.Fatal(err)
			}
			defer node.Close()
			p, err := node.NewPlugin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pool, err := p.Resources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			published, err := gpudra.ResourceSlices(p.DriverName(), node.Name, pool)
			if err != nil {
				t.Fatal(err)
			}
			templates, err := gpudra.SliceTemplates(gpudra.NewBuilder(sliceOpts...), node.Inventory)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(withoutNodeSpecifics(published, node.Name), templates); diff != "" {
				t.Errorf("templates differ from the published slices beyond node-specific fields (-published +template):\n%s", diff)
			}
			checkNothingNodeSpecific(t, node, templates)
			for _, s := range [][]*resourceapi.ResourceSlice{published, templates} {
				nodeName := *s[0].Spec.NodeName
				sim := simulate.New(nodeName, selectors.DeviceClasses(""), s)
				if _, err := sim.Allocate(ctx, tc.claim); err != nil {
					t.Errorf("claim %s on the slices of %s: %v", tc.claim.Name, nodeName, err)
				}
			}
		})
	}
}

// checkNothingNodeSpecific fails when a template carries the node's name or the UUID or PCI
// bus ID of one of its GPUs or MIG devices.
func checkNothingNodeSpecific(t *testing.T, node *draplugintest.Node, templates []*resourceapi.ResourceSlice) {
	t.Helper()
	ids := []string{node.Name}
	for _, g := range node.Inventory.GPUs {
		ids = append(ids, g.UUID, g.PCIBusID)
		for _, m := range g.MIGDevices {
			ids = append(ids, m.UUID)
		}
	}
	text := fmt.Sprintf("%+v", templates)
	for _, id := range ids {
		if id != "" && strings.Contains(text, id) {
			t.Errorf("a template contains %q, which identifies node %s or its hardware", id, node.Name)
		}
	}
}

func TestSliceTemplatesOptions(t *testing.T) {
	inv := inventory(t, "l4x8")
	templates, err := gpudra.SliceTemplates(gpudra.NewBuilder(gpudra.WithDeviceTaints(func(string) []resourceapi.DeviceTaint {
		return []resourceapi.DeviceTaint{{Key: "gpu.nvidia.com/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	})), inv, gpudra.WithTemplateNodeName("tmpl-ng-1"), gpudra.WithTemplateDriverVersions())
	if err != nil {
		t.Fatal(err)
	}
	s := templates[0]
	d := s.Spec.Devices[0]
	if *s.Spec.NodeName != "tmpl-ng-1" || s.Spec.Pool.Name != "tmpl-ng-1" || !strings.HasPrefix(s.Name, "tmpl-ng-1-") {
		t.Errorf("template slice %s for node %s, pool %s", s.Name, *s.Spec.NodeName, s.Spec.Pool.Name)
	}
	if d.Attributes["driverVersion"].VersionValue == nil || d.Attributes["cudaDriverVersion"].VersionValue == nil || len(d.Taints) != 0 {
		t.Errorf("device %s: driver versions kept %v, taints %v", d.Name, d.Attributes["driverVersion"], d.Taints)
	}
	if mem, ok := d.Capacity["memory"]; !ok || mem.Value.Cmp(resource.MustParse("1Gi")) < 0 {
		t.Errorf("device %s: capacity %v", d.Name, d.Capacity)
	}
	if _, err := gpudra.SliceTemplates(nil, inv); err == nil {
		t.Error("SliceTemplates with a nil builder succeeded")
	}
	if _, err := gpudra.SliceTemplates(gpudra.NewBuilder(), nil); err == nil {
		t.Error("SliceTemplates with a nil inventory succeeded")
	}
}

// ExampleSliceTemplates prints the template of a node of eight L4 GPUs, as an autoscaler would
// get it for a node group of that machine type.
func ExampleSliceTemplates() {
	machine, err := gputest.New("l4x8")
	if err != nil {
		panic(err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), machine)
	if err != nil {
		panic(err)
	}
	templates, err := gpudra.SliceTemplates(gpudra.NewBuilder(), inv)
	if err != nil {
		panic(err)
	}
	d := templates[0].Spec.Devices[0]
	_, hasUUID := d.Attributes["uuid"]
	fmt.Println(*templates[0].Spec.NodeName, len(templates[0].Spec.Devices), d.Name, *d.Attributes["productName"].StringValue, hasUUID)
	// Output: template-node 8 gpu-0 NVIDIA L4 false
}
