package sharing_test

import (
	"encoding/json"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

const (
	uuidA  = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
	uuidB  = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
	uuidC  = "GPU-cccccccc-0000-0000-0000-000000000003"
	uuidM1 = "MIG-dddddddd-0000-0000-0000-000000000004"
	uuidM2 = "MIG-eeeeeeee-0000-0000-0000-000000000005"
	uuidP  = "GPU-ffffffff-0000-0000-0000-000000000006" // a Pascal GPU
)

// Claim UIDs of the tests: canonical UUIDs, as Kubernetes makes them and as Prepare and Plan
// require, in the order of the names they stand for.
const (
	uidA        = "00000000-0000-4000-8000-000000000001"
	uidB        = "00000000-0000-4000-8000-000000000002"
	uidC        = "00000000-0000-4000-8000-000000000003"
	uidInflight = "00000000-0000-4000-8000-000000000004"
	uidKept     = "00000000-0000-4000-8000-000000000005"
	uidMig      = "00000000-0000-4000-8000-000000000006"
	uidOther    = "00000000-0000-4000-8000-000000000007"
	uidOwn      = "00000000-0000-4000-8000-000000000008"
	uidPartial  = "00000000-0000-4000-8000-000000000009"
	uidU        = "00000000-0000-4000-8000-000000000010"
	uidU0       = "00000000-0000-4000-8000-000000000011"
	uidU1       = "00000000-0000-4000-8000-000000000012"
	uidU2       = "00000000-0000-4000-8000-000000000013"
	uidZZ       = "00000000-0000-4000-8000-0000000000ff"
)

var devices = []sharing.Device{
	{Name: "gpu-0", UUID: uuidA, Index: 0, MemoryBytes: 80 << 30},
	{Name: "gpu-1", UUID: uuidB, Index: 1, MemoryBytes: 80 << 30},
	{Name: "gpu-2", UUID: uuidC, Index: 2, MemoryBytes: 40 << 30},
	{Name: "gpu-2-mig-1g5gb-0", UUID: uuidM1, ParentUUID: uuidC, Index: 2, IsMIG: true, MemoryBytes: 5 << 30},
	{Name: "gpu-2-mig-1g5gb-1", UUID: uuidM2, ParentUUID: uuidC, Index: 2, IsMIG: true, MemoryBytes: 5 << 30},
	{Name: "gpu-3", UUID: uuidP, Index: 3, MemoryBytes: 16 << 30},
}

var lookup = sharing.DevicesByName(devices...)

func allUUIDs() []string { return []string{uuidA, uuidB, uuidC, uuidM1, uuidM2, uuidP} }

func newHost() *sharingtest.FakeHost { return sharingtest.NewFakeHost(allUUIDs()...) }

func newManager(t *testing.T, h *sharingtest.FakeHost) *sharing.Manager {
	t.Helper()
	return sharing.NewManager("gpu.nvidia.com", sharing.WithTimeSlicer(h), sharing.WithComputeModeSetter(h), sharing.WithMPSDaemons(h),
		sharing.WithMPSRoot("/var/lib/kubelet/plugins/gpu.nvidia.com/mps"))
}

// result is an allocation result of our driver.
func result(request, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "gpu.nvidia.com", Pool: "node-1", Device: device}
}

// shared marks a result as one allocation of a device that allows several.
func shared(r resourceapi.DeviceRequestAllocationResult, shareID string) resourceapi.DeviceRequestAllocationResult {
	id := types.UID(shareID)
	r.ShareID = &id
	return r
}

// withMemory adds consumed memory capacity to a result.
func withMemory(r resourceapi.DeviceRequestAllocationResult, q string) resourceapi.DeviceRequestAllocationResult {
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(q)}
	return r
}

func opaque(source resourceapi.AllocationConfigSource, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source:   source,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "gpu.nvidia.com", Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	}
}

func claimCfg(params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return opaque(resourceapi.AllocationConfigSourceClaim, params, requests...)
}

func classCfg(params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return opaque(resourceapi.AllocationConfigSourceClass, params, requests...)
}

const (
	exclusiveGPU = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`
	tsDefault    = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`
	tsShort      = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Short"}}}`
	tsLong       = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`
	mpsGPU       = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`
	mpsMIG       = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`
)

func newClaim(uid string, results []resourceapi.DeviceRequestAllocationResult, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results, Config: configs},
		}},
	}
}

func results(rs ...resourceapi.DeviceRequestAllocationResult) []resourceapi.DeviceRequestAllocationResult {
	return rs
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}
