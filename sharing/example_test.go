package sharing_test

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

// A claim from seed 000's MPS template, prepared on a fake host and undone.
func ExampleManager_Prepare() {
	const gpu = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
	host := sharingtest.NewFakeHost(gpu)
	m := sharing.NewManager("gpu.nvidia.com",
		sharing.WithMPSRoot("/run/gpudra/mps"),
		sharing.WithTimeSlicer(host), sharing.WithComputeModeSetter(host), sharing.WithMPSDaemons(host))

	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "mps-gpu", Name: "shared-gpu-claim", UID: "3f2c6a1e-8d4b-4c2a-9e7f-5b1d0c9a8e21"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "shared-gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"}},
			Config: []resourceapi.DeviceAllocationConfiguration{{
				Source:   resourceapi.AllocationConfigSourceClaim,
				Requests: []string{"shared-gpu"},
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver:     "gpu.nvidia.com",
					Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`)},
				}},
			}},
		}}},
	}
	lookup := sharing.DevicesByName(sharing.Device{Name: "gpu-0", UUID: gpu})

	rec, err := m.Prepare(context.Background(), claim, lookup)
	if err != nil {
		panic(err)
	}
	d := rec.Devices[0]
	fmt.Println(d.Device, d.Strategy, d.Edits.Env)
	for _, mnt := range d.Edits.Mounts {
		fmt.Println(mnt.HostPath, "->", mnt.ContainerPath)
	}
	fmt.Println(host.State().ComputeModes[gpu])

	if err := m.Undo(context.Background(), rec); err != nil {
		panic(err)
	}
	fmt.Println(host.State().ComputeModes[gpu], len(host.State().Daemons))
	// Output:
	// gpu-0 MPS [CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps]
	// /run/gpudra/mps/3f2c6a1e-8d4b-4c2a-9e7f-5b1d0c9a8e21/pipe -> /tmp/nvidia-mps
	// /run/gpudra/mps/3f2c6a1e-8d4b-4c2a-9e7f-5b1d0c9a8e21/shm -> /dev/shm
	// EXCLUSIVE_PROCESS
	// DEFAULT 0
}
