package simulate_test

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

func ExampleSimulator() {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: "device.driver == 'gpu.example.com'"}}}}}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpu.example.com", NodeName: ptr.To("node-1"),
		Pool:    resourceapi.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0"}},
	}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"}}}}}}

	sim := simulate.New("node-1", []*resourceapi.DeviceClass{class}, []*resourceapi.ResourceSlice{slice})
	got, err := sim.Allocate(context.Background(), claim)
	if err != nil {
		panic(err)
	}
	fmt.Println(got.Status.Allocation.Devices.Results[0].Device)
	_, err = sim.Allocate(context.Background(), claim)
	fmt.Println(err)
	// Output:
	// gpu-0
	// claim default/c: claim cannot be allocated on this node
}
func ExampleLoadWorkload() {
	manifest := `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  containers: [{name: c, image: cuda}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
`
	w, err := simulate.LoadWorkload([]byte(manifest), uid)
	if err != nil {
		panic(err)
	}
	for _, c := range w.Claims {
		fmt.Println(c.Namespace, c.Name, c.Spec.Devices.Requests[0].Exactly.DeviceClassName)
	}
	// Output: default one-gpu-1 gpu.nvidia.com
}

// ExampleSimulator_dynamicMIG checks offline, with the scheduler's allocator, what the slices of
// a fake DGX A100 with dynamic MIG let users do: claims for a 1g.5gb partition fit seven to a
// GPU, the first ones on the same GPU, and the shared counters refuse the 57th.
func ExampleSimulator_dynamicMIG() {
	ctx := context.Background()
	machine, err := gputest.New("dgx-a100-40gb")
	if err != nil {
		panic(err)
	}
	inv, err := nvmlgpu.Enumerate(ctx, machine)
	if err != nil {
		panic(err)
	}
	b := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil))
	pool, err := b.Build("node-1", inv)
	if err != nil {
		panic(err)
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), "node-1", pool)
	if err != nil {
		panic(err)
	}
	sim := simulate.New("node-1", selectors.DeviceClasses(b.DriverName()), slices)

	profile, err := selectors.For(b.DriverName()).Profiles("1g.5gb")
	if err != nil {
		panic(err)
	}
	var got []string
	for i := 0; ; i++ {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("small-", i)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com",
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: profile}}}}}}}}}
		allocated, err := sim.Allocate(ctx, claim)
		if errors.Is(err, simulate.ErrUnschedulable) {
			break
		}
		if err != nil {
			panic(err)
		}
		got = append(got, allocated.Status.Allocation.Devices.Results[0].Device)
	}
	fmt.Println(len(got), "claims fit:", got[0], got[1], "...", got[len(got)-1])
	// Output:
	// 56 claims fit: gpu-0-mig-1g5gb-19-6 gpu-0-mig-1g5gb-19-4 ... gpu-7-mig-1g5gb-19-3
}
