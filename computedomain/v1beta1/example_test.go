package v1beta1_test

import (
	"fmt"

	"sigs.k8s.io/yaml"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// A ComputeDomain as NVIDIA's IMEX examples write it decodes into the package's types.
func Example() {
	manifest := `
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: training-domain
spec:
  numNodes: 4
  channel:
    resourceClaimTemplate:
      name: training-domain-channel
`
	var cd cdv1beta1.ComputeDomain
	if err := yaml.UnmarshalStrict([]byte(manifest), &cd); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cd.Kind, cd.Name, cd.Spec.NumNodes, cd.Spec.Channel.ResourceClaimTemplate.Name)
	// Output: ComputeDomain training-domain 4 training-domain-channel
}
