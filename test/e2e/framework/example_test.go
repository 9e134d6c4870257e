package framework_test

import (
	"fmt"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// ExampleDecodeObjects reads a multi-document manifest as the harness does for workloads.
func ExampleDecodeObjects() {
	objs, err := framework.DecodeObjects([]byte(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: gpu
---
# an empty document is skipped
---
apiVersion: v1
kind: Pod
metadata:
  name: app
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range objs {
		fmt.Println(o.GetKind(), o.GetName())
	}
	// Output:
	// ResourceClaim gpu
	// Pod app
}
