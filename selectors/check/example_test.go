package check_test

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/selectors/check"
)

// ExampleChecker_Check checks a Deployment of two pods, each with a claim for a GPU of at least
// 40Gi, on a node with one GPU of 80Gi and one of 20Gi: the second pod's claim does not fit, and
// Check says why.
func ExampleChecker_Check() {
	gpu := func(name, memory string) resourceapi.Device {
		return resourceapi.Device{Name: name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}},
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}}}
	}
	slices := []*resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu.nvidia.com"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To("node-1"),
			Pool:    resourceapi.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{gpu("gpu-0", "80Gi"), gpu("gpu-1", "20Gi")}},
	}}
	manifest := `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: big-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel: {expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer}
spec:
  replicas: 2
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers: [{name: c, image: trainer, resources: {claims: [{name: gpu}]}}]
      resourceClaims: [{name: gpu, resourceClaimTemplateName: big-gpu}]
`
	report, err := check.NewChecker(check.WithMachine("node-1", slices)).Check(context.Background(), "trainer.yaml", []byte(manifest))
	if err != nil {
		panic(err) // not YAML at all
	}
	for _, f := range report.Findings {
		fmt.Println(f)
	}
	for _, c := range report.Claims {
		fmt.Println(c.Claim, c.Allocated, c.Devices, c.Reasons)
	}
	fmt.Println(report.OK())
	// Output:
	// default/big-gpu-1 true [{gpu gpu.nvidia.com node-1 gpu-0 false}] []
	// default/big-gpu-2 false [] [request "gpu" (1 of class gpu.nvidia.com): 0 of 2 devices usable; 1 allocated to claim default/big-gpu-1; 1 rejected by request selector #0 `device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0`]
	// false
}
