package workload_test

import (
	"fmt"

	"github.com/gpudra/gpudra/internal/workload"
)

func ExampleLoad() {
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
	w, err := workload.Load([]byte(manifest), uid)
	if err != nil {
		panic(err)
	}
	for _, c := range w.Claims {
		fmt.Println(c.Namespace, c.Name, c.Spec.Devices.Requests[0].Exactly.DeviceClassName)
	}
	// Output: default one-gpu-1 gpu.nvidia.com
}
