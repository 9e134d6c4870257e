package manifest_test

import (
	"errors"
	"fmt"

	"github.com/gpudra/gpudra/selectors/manifest"
)

// ExampleDecode reads a claim template and the Deployment that uses it; the second claim has a
// field the API does not have, so it does not decode and the others are still returned.
func ExampleDecode() {
	objs, err := manifest.Decode([]byte(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: typo}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, cont: 2}}]}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml}
spec:
  replicas: 3
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers: [{name: c, image: trainer, resources: {claims: [{name: gpu}]}}]
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
`))
	for _, o := range objs {
		if spec, path := manifest.ClaimSpec(o.Object); spec != nil {
			fmt.Println(o, path, len(spec.Devices.Requests), "request")
		}
		if spec, pods := manifest.PodSpec(o.Object); spec != nil {
			fmt.Println(o, pods, "pods use", spec.ResourceClaims[0].Name)
		}
	}
	var de *manifest.DecodeError
	if errors.As(err, &de) {
		fmt.Println(de.Object)
	}
	// Output:
	// ResourceClaimTemplate ml/one-gpu spec.spec 1 request
	// Deployment ml/trainer 3 pods use gpu
	// ResourceClaim typo
}
