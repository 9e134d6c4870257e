package gpudra_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
)

// TestAttributesTheGPUDoesNotReport (issue 28): attributes whose NVML call answered
// ERROR_NOT_SUPPORTED are left out of the devices, not published empty or made up.
func TestAttributesTheGPUDoesNotReport(t *testing.T) {
	ns := nvml.ERROR_NOT_SUPPORTED
	inv := inventory(t, "l4x8", gputest.WithFaultAfter("Device.GetBrand", 0, ns), gputest.WithFaultAfter("Device.GetArchitecture", 0, ns),
		gputest.WithFaultAfter("Device.GetPciInfo", 0, ns), gputest.WithFaultAfter("Device.GetNumaNodeId", 0, ns))
	devs, err := gpudra.NewBuilder().Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 8 {
		t.Fatalf("%d devices, want 8", len(devs))
	}
	for _, d := range devs {
		for _, a := range []resourceapi.QualifiedName{gpudra.AttrBrand, gpudra.AttrArchitecture, gpudra.StdAttrPCIBusID, gpudra.StdAttrPCIeRoot, gpudra.StdAttrNUMANode} {
			if v, ok := d.Attributes[a]; ok {
				t.Errorf("device %s has attribute %s = %v, which the GPU did not report", d.Name, a, v)
			}
		}
		if _, ok := d.Attributes[gpudra.AttrProductName]; !ok {
			t.Errorf("device %s lost its product name", d.Name)
		}
	}
}
