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
	"github.com/gpudra/gpudra/selectors/lint"
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

	linter := lint.NewLinter(lint.Environment{Slices: slices})
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
// chart in deployments/helm/gpu-dra-driver installs these three): claims name them in
// deviceClassName.
func ExampleDeviceClasses() {
	for _, c := range selectors.DeviceClasses("gpu.nvidia.com") {
		fmt.Println(c.Name+":", c.Spec.Selectors[0].CEL.Expression)
	}
	// Output:
	// gpu.nvidia.com: device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'
	// mig.nvidia.com: device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'
	// vfio.gpu.nvidia.com: device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'
}
