package selectors_test

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/selectors"
)

// Example compiles a selector written with the builders and evaluates it on a published device,
// as the scheduler does.
func Example() {
	b := selectors.For("gpu.nvidia.com")
	cc, err := b.MinComputeCapability("8.0")
	if err != nil {
		panic(err)
	}
	expr := selectors.And(b.GPU(), cc, b.MinMemory(resource.MustParse("40Gi")))
	fmt.Println(expr)

	sel, err := selectors.NewCompiler().Compile(expr)
	if err != nil {
		panic(err)
	}
	gpu := selectors.NewDevice("gpu.nvidia.com", "node-1", &resourceapi.Device{
		Name: "gpu-0",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":                  {StringValue: ptr.To("gpu")},
			"cudaComputeCapability": {VersionValue: ptr.To("9.0.0")},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("81559Mi")}},
	})
	ok, err := sel.Matches(context.Background(), gpu)
	fmt.Println(ok, err, sel.Cost < resourceapi.CELSelectorExpressionMaxCost)
	// Output:
	// device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu' && device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('8.0.0')) >= 0 && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0
	// true <nil> true
}

// ExampleLinter_Expression lints the DeviceClass selector of seed 003, which reads memory as
// an attribute domain.
func ExampleLinter_Expression() {
	l := selectors.NewLinter(selectors.Environment{})
	for _, f := range l.Expression(context.Background(), `device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`) {
		fmt.Printf("%s %s at %d:%d\n", f.Severity, f.Rule, f.Line, f.Column)
	}
	fmt.Println(l.Expression(context.Background(), `device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`)[0].Fixed)
	// Output:
	// error name-as-domain at 1:38
	// error compile at 1:66
	// device.driver == 'gpu.nvidia.com' && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40000Mi')) >= 0
}

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
	up, err := selectors.NewUpgrader("").Upgrade([]byte(manifest))
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

// ExamplePolicy_Evaluate is seed 001's CrossGuard policy: no full-GPU MIG profiles.
func ExamplePolicy_Evaluate() {
	policy, err := selectors.ParsePolicy([]byte(`blockedMIGProfiles: ["4g.20gb", "7g.*"]`))
	if err != nil {
		panic(err)
	}
	objs, err := selectors.DecodeManifest([]byte(`apiVersion: resource.k8s.io/v1
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
	for _, v := range policy.Evaluate(context.Background(), objs, selectors.Environment{}) {
		fmt.Println(v)
	}
	// Output:
	// ResourceClaimTemplate mig-invalid-template request mig-gpu: blocked-mig-profile: selects MIG profile 7g.80gb, which the policy blocks (7g.*)
}

// ExampleBuilder_GPUClaim writes the devices of a claim for four GPUs on one NVLink island (for
// example the NVSwitch baseboard of a DGX) that also share a NUMA node.
func ExampleBuilder_GPUClaim() {
	b := selectors.For("gpu.nvidia.com")
	devices, err := b.GPUClaim("gpus", 4, b.SameNVLinkIsland, selectors.SameNUMANode)
	if err != nil {
		panic(err)
	}
	r := devices.Requests[0]
	fmt.Println(r.Name, r.Exactly.DeviceClassName, r.Exactly.Count)
	for _, c := range devices.Constraints {
		fmt.Println(c.Requests, *c.MatchAttribute)
	}
	// Output:
	// gpus gpu.nvidia.com 4
	// [gpus] gpu.nvidia.com/nvlinkIsland
	// [gpus] resource.kubernetes.io/numaNode
}

// ExampleDevicesFromSlices evaluates the selectors users will write against the slices a fake
// DGX A100 in mig-parted's all-balanced layout publishes (per GPU one 3g.20gb, one 2g.10gb and
// two 1g.5gb), as the scheduler would, and lints a typical mistake.
func ExampleDevicesFromSlices() {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIGConfig("all-balanced"))
	if err != nil {
		panic(err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), machine)
	if err != nil {
		panic(err)
	}
	b := gpudra.NewBuilder()
	pool, err := b.Build("node-1", inv)
	if err != nil {
		panic(err)
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), "node-1", pool)
	if err != nil {
		panic(err)
	}
	devices := selectors.DevicesFromSlices(slices)

	compiler := selectors.NewCompiler()
	for _, expr := range []string{
		`device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`,
		`device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10Gi')) >= 0`, // 2g.10gb has 9856Mi
	} {
		sel, err := compiler.Compile(expr)
		if err != nil {
			panic(err)
		}
		n := 0
		for _, d := range devices {
			if ok, err := sel.Matches(context.Background(), d); err == nil && ok {
				n++
			}
		}
		fmt.Println(n, "of", len(devices), "devices:", expr)
	}

	linter := selectors.NewLinter(selectors.Environment{Slices: slices})
	for _, expr := range []string{
		`device.attributes['gpu.nvidia.com'].memory >= 10000`,
		`device.attributes['gpu.nvidia.com'].profile == '1g.10gb'`,
	} {
		for _, f := range linter.Expression(context.Background(), expr) {
			fmt.Println(f.Severity, f.Rule)
			if f.Fixed != "" {
				fmt.Println("  fix:", f.Fixed)
			}
		}
	}
	// Output:
	// 16 of 32 devices: device.attributes['gpu.nvidia.com'].profile == '1g.5gb'
	// 8 of 32 devices: device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10Gi')) >= 0
	// error attribute-is-capacity
	//   fix: device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10000Mi')) >= 0
	// warning matches-nothing
}

// ExampleDeviceClasses prints the DeviceClasses a driver ships with its deployment (the Helm
// chart in deployments/helm/gpu-dra-driver installs these two): claims name them in
// deviceClassName.
func ExampleDeviceClasses() {
	for _, c := range selectors.DeviceClasses("gpu.nvidia.com") {
		fmt.Println(c.Name+":", c.Spec.Selectors[0].CEL.Expression)
	}
	// Output:
	// gpu.nvidia.com: device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'
	// mig.nvidia.com: device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'
}
