package simulate_test

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
