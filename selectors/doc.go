// Package selectors compiles and evaluates DRA device selectors (CEL) exactly as the Kubernetes
// API server and scheduler do, and writes correct selectors, constraints and DeviceClasses for
// the gpudra attribute contract. It is the part a driver links: it does not import the
// scheduler's allocator.
//
// # Compiling and evaluating
//
// A Compiler uses k8s.io/dynamic-resource-allocation/cel with the CEL features of a Kubernetes
// 1.37 scheduler with its default feature gates (WithCELFeatures to change them; the allocator
// features they follow from are selectors/check's DefaultFeatures). Compile validates like the
// API server does for a new object — length, syntax and types with line and column, result
// type, and the estimated cost against resourceapi.CELSelectorExpressionMaxCost — and caches
// the result. CompileStored compiles an expression already stored in a cluster as the scheduler
// does, without the checks of a new object. Selector.Matches evaluates with the scheduler's
// program — its runtime cost limit included, whatever WithCostLimit says — on a Device, prepared
// once from a published resourceapi.Device (NewDevice, DevicesFromSlices), so evaluating many
// selectors costs only the evaluations. The conversion is ours (upstream converts the device on
// every call); a test runs upstream's own CEL test table through it.
//
//	compiler := selectors.NewCompiler()
//	sel, err := compiler.Compile(`device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`)
//	if err != nil {
//		return err // a *CompileError: line, column and message of every issue
//	}
//	for _, d := range selectors.DevicesFromSlices(slices) {
//		ok, err := sel.Matches(ctx, d) // err: the runtime error that makes the scheduler skip the node
//		...
//	}
//
// # Writing selectors
//
// For(driver) returns a Builder for the common needs: GPU or MIG devices, profiles, product
// name globs, architectures, minimum compute capability, driver version ranges, memory (a
// capacity), combined with And, Or and Not. SamePCIeRoot, SameNUMANode and the Builder's
// SameNVLinkIsland, SameNVLinkDomain and SameParentGPU are matchAttribute constraints;
// Builder.GPUClaim writes a claim for N GPUs under any of them. DeviceClasses returns the classes
// the driver ships (gpu.nvidia.com, mig.nvidia.com); ExtendedResourceClass one that also serves
// an extended resource name.
//
// # The other selectors packages
//
// Each does one job on top of this one:
//
//   - selectors/lint finds the mistakes people make in selectors and claims, with a fix that
//     compiles, and enforces a platform Policy.
//   - selectors/upgrade rewrites manifests written for older DRA APIs into resource.k8s.io/v1.
//   - selectors/check does all of it for one manifest and allocates its claims on a machine
//     with the scheduler's allocator, explaining what does not fit.
//   - selectors/manifest decodes manifests; selectors/finding is what lint and check report.
package selectors
