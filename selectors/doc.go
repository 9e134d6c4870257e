// Package selectors checks GPU device requests before they reach a cluster: it compiles and
// evaluates DRA device selectors (CEL) exactly as the Kubernetes API server and scheduler do,
// writes correct selectors for the gpudra attribute contract, finds the mistakes people make
// in them, enforces a platform policy, upgrades manifests written for older DRA APIs, and
// simulates allocation on a machine with an explanation when nothing fits.
//
// # Compiling and evaluating
//
// A Compiler uses k8s.io/dynamic-resource-allocation/cel with the features of a Kubernetes
// 1.37 scheduler (DefaultFeatures; WithFeatures to change them). Compile validates like the
// API server does for a new object — length, syntax and types with line and column, result
// type, and the estimated cost against resourceapi.CELSelectorExpressionMaxCost — and caches
// the result. CompileStored compiles an expression already stored in a cluster as the scheduler
// does, without the checks of a new object. Selector.Matches evaluates with the scheduler's
// program — its runtime cost limit included, whatever WithCostLimit says — on a Device, prepared
// once from a published resourceapi.Device (NewDevice, DevicesFromSlices), so evaluating many
// selectors costs only the evaluations. The conversion is ours (upstream converts the device on
// every call); a test runs upstream's own CEL test table through it.
//
// # Writing selectors
//
// For(driver) returns a Builder for the common needs: GPU or MIG devices, profiles, product
// name globs, architectures, minimum compute capability, driver version ranges, memory (a
// capacity), combined with And, Or and Not. SamePCIeRoot, SameNUMANode and the Builder's
// SameNVLinkIsland, SameNVLinkDomain and SameParentGPU are matchAttribute constraints;
// Builder.GPUClaim writes a claim for N GPUs under any of them. DeviceClasses returns the classes
// the driver ships (gpu.nvidia.com, mig.nvidia.com).
//
// # Linting, policy, upgrade
//
// An Environment says what manifests are checked against: the driver, the target machine's
// ResourceSlices, the cluster's DeviceClasses and the namespace. A Linter reports findings with a suggested fix (Finding.Fixed is a corrected expression
// that compiles): capacities read as attributes, names read as attribute domains, unknown
// attributes, wrong domains, versions compared as strings, quantities compared with numbers,
// MIG profiles that exist on no GPU of the target machine (Environment.Slices), requests without
// exactly, unqualified constraint attributes, and selectors that match nothing, everything, or
// fail on the machine's devices. A Policy blocks or allows MIG profiles, caps full GPUs per
// claim and requires a sharing strategy per namespace. An Upgrader rewrites
// resource.k8s.io/v1beta1, v1beta2 and v1alpha2 objects (with NVIDIA's v1alpha1
// GpuClaimParameters and MigClaimParameters) into resource.k8s.io/v1.
//
// # Checking a manifest
//
// A Checker does all of it for one manifest and, with a machine, allocates every claim pod by
// pod with the scheduler's allocator (package simulate), saying per claim which devices it gets
// or why nothing fits: which selector or constraint rejected which devices. The reference
// driver's check command is a thin layer over it.
//
//	c := selectors.NewChecker(selectors.WithMachine("dgx-a100-40gb", slices), selectors.WithPolicy(policy))
//	report, err := c.Check(ctx, "workload.yaml", manifest)
//	if err != nil {
//		return err // not YAML at all
//	}
//	for _, f := range report.Findings {
//		fmt.Println(f) // error [attribute-is-capacity] ResourceClaim ml/x spec.devices...: ... (fix: ...)
//	}
//	for _, claim := range report.Claims {
//		fmt.Println(claim.Claim, claim.Allocated, claim.Devices, claim.Reasons)
//	}
package selectors
