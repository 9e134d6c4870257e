package upgrade_test

import (
	"fmt"

	"github.com/gpudra/gpudra/selectors/upgrade"
)

// ExampleUpgrader_Upgrade converts a claim of seed 002 (Kubernetes 1.26 classic DRA) that asks
// for a MIG device through NVIDIA's MigClaimParameters. The configuration is written defaulted,
// as the driver will read it.
func ExampleUpgrader_Upgrade() {
	manifest := `apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata:
  name: small
spec:
  resourceClassName: gpu.nvidia.com
  parametersRef:
    apiGroup: gpu.resource.nvidia.com
    kind: MigClaimParameters
    name: mig-1g.5gb
---
apiVersion: gpu.resource.nvidia.com/v1alpha1
kind: MigClaimParameters
metadata:
  name: mig-1g.5gb
spec:
  profile: 1g.5gb
  sharing:
    strategy: MPS
`
	up, err := upgrade.NewUpgrader("").Upgrade([]byte(manifest))
	if err != nil {
		panic(err)
	}
	fmt.Print(string(up.Manifest))
	// Output:
	// apiVersion: resource.k8s.io/v1
	// kind: ResourceClaim
	// metadata:
	//   name: small
	// spec:
	//   devices:
	//     config:
	//     - opaque:
	//         driver: gpu.nvidia.com
	//         parameters:
	//           apiVersion: resource.nvidia.com/v1beta1
	//           kind: MigDeviceConfig
	//           sharing:
	//             mpsConfig: {}
	//             strategy: MPS
	//       requests:
	//       - mig
	//     requests:
	//     - exactly:
	//         deviceClassName: mig.nvidia.com
	//         selectors:
	//         - cel:
	//             expression: device.attributes['gpu.nvidia.com'].profile == '1g.5gb'
	//       name: mig
}
