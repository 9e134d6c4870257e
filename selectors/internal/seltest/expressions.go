package seltest

// EvalExpressions are selectors that exercise every value type of the device variable,
// unknown domains and names, and runtime errors.
var EvalExpressions = []string{
	`true`,
	`device.driver == 'gpu.nvidia.com'`,
	`device.attributes['gpu.nvidia.com'].type == 'gpu'`,
	`device.attributes['gpu.nvidia.com'].type == 'mig' && device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`,
	`device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('a100')`,
	`device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('8.0.0')) >= 0`,
	`device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))`,
	`device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0`,
	`device.capacity['gpu.nvidia.com'].memory == quantity('40Gi')`,
	`device.attributes['resource.kubernetes.io'].numaNode == 0`,
	`has(device.attributes['gpu.nvidia.com'].profile)`,
	`device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`, // runtime error on full GPUs
	`device.attributes['other.example.com'].x == 1`,           // unknown domain: no such key
	`size(device.attributes['gpu.nvidia.com']) > 10`,
	`device.allowMultipleAllocations`,
	`device.attributes['gpu.nvidia.com'].index < 4 || device.attributes['gpu.nvidia.com'].type == 'mig'`,
	`cel.bind(g, device.attributes['gpu.nvidia.com'], g.type == 'gpu' && g.minor % 2 == 0)`,
}
