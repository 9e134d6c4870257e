package lint_test

import (
	"context"
	"fmt"

	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/manifest"
)

// ExampleLinter_Expression lints the DeviceClass selector of seed 003, which reads memory as
// an attribute domain.
func ExampleLinter_Expression() {
	l := lint.NewLinter(lint.Environment{})
	for _, f := range l.Expression(context.Background(), `device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`) {
		fmt.Printf("%s %s at %d:%d\n", f.Severity, f.Rule, f.Line, f.Column)
	}
	fmt.Println(l.Expression(context.Background(), `device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`)[0].Fixed)
	// Output:
	// error name-as-domain at 1:38
	// error compile at 1:66
	// device.driver == 'gpu.nvidia.com' && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40000Mi')) >= 0
}

// ExamplePolicy_Evaluate is seed 001's CrossGuard policy: no full-GPU MIG profiles.
func ExamplePolicy_Evaluate() {
	policy, err := lint.ParsePolicy([]byte(`blockedMIGProfiles: ["4g.20gb", "7g.*"]`))
	if err != nil {
		panic(err)
	}
	objs, err := manifest.Decode([]byte(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: mig-invalid-template
spec:
  spec:
    devices:
      requests:
      - name: mig-gpu
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: device.attributes["gpu.nvidia.com"].profile == "7g.80gb"
`))
	if err != nil {
		panic(err)
	}
	for _, v := range policy.Evaluate(context.Background(), objs, lint.Environment{}) {
		fmt.Println(v)
	}
	// Output:
	// ResourceClaimTemplate mig-invalid-template request mig-gpu: blocked-mig-profile: selects MIG profile 7g.80gb, which the policy blocks (7g.*)
}
