// Package lint finds the mistakes people make in DRA device selectors and claims for the
// gpudra attribute contract, and enforces a platform policy on the claims of a manifest.
//
// # Linting
//
// An Environment says what is checked against: the driver, the target machine's
// ResourceSlices, the cluster's DeviceClasses and the namespace. A Linter reports findings
// (package selectors/finding) with a suggested fix; a finding's Fixed is a corrected expression
// that compiles. It finds capacities read as attributes, names read as attribute domains,
// unknown attributes, wrong domains, versions compared as strings, quantities compared with
// numbers, MIG profiles that exist on no GPU of the target machine, requests without exactly,
// unqualified constraint attributes, unknown classes and requests, and selectors that match
// nothing, everything, or fail on the machine's devices.
//
//	l := lint.NewLinter(lint.Environment{Machine: "dgx-a100-40gb", Slices: slices})
//	for _, f := range l.Expression(ctx, `device.attributes['memory'] >= 40000`) {
//		fmt.Println(f, f.Fixed)
//	}
//	objs, _ := manifest.Decode(data)
//	findings := l.Objects(ctx, objs)
//
// # Policy
//
// A Policy (ParsePolicy reads one from YAML) blocks or allows MIG profiles, caps full GPUs per
// claim and requires a sharing strategy per namespace; Policy.Evaluate returns a Violation for
// every request that breaks it.
package lint
