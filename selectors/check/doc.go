// Package check checks a whole manifest before it reaches a cluster: what the API server would
// refuse, the upgrade to resource.k8s.io/v1, lint findings and policy violations, and then the
// allocation of every claim on a target machine, pod by pod, with the scheduler's allocator
// (package simulate), explaining per claim which devices it gets or why nothing fits: which
// selector or constraint rejected which devices. The reference driver's check command is a
// thin layer over it. It is the only selectors package that imports the allocator.
//
// # Checking a manifest
//
//	c := check.NewChecker(check.WithMachine("dgx-a100-40gb", slices), check.WithPolicy(policy))
//	report, err := c.Check(ctx, "workload.yaml", data)
//	if err != nil {
//		return err // not YAML at all
//	}
//	for _, f := range report.Findings {
//		fmt.Println(f) // error [attribute-is-capacity] ResourceClaim ml/x spec.devices...: ... (fix: ...)
//	}
//	for _, claim := range report.Claims {
//		fmt.Println(claim.Claim, claim.Allocated, claim.Devices, claim.Reasons)
//	}
//
// # Features
//
// The allocator runs with DefaultFeatures, the features of a Kubernetes 1.37 scheduler with its
// default feature gates (WithFeatures to change them); selectors compile with the CEL features
// those imply (CELFeatures), unless WithCompiler brings a compiler of its own.
//
// # API versions
//
// Objects of apiVersions a default Kubernetes 1.37 API server does not serve are error
// findings (finding.RuleNotServed); WithAPIVersions declares more, checked with
// ParseAPIVersions. ComputeDomains (resource.nvidia.com/v1beta1) are served: the CRD of the
// compute-domain driver, which the same chart installs.
//
// # ComputeDomains
//
// A ComputeDomain is validated as its CRD does (finding.RuleInvalidComputeDomain, naming the
// field). The ResourceClaimTemplate its spec.channel names is the one the domain's controller
// makes (objects.ChannelTemplate) in the NVLink clique of the machine's compute-domain devices,
// so pods may name it and their claims are allocated on the machine's IMEX channels; the
// driver's two DeviceClasses (compute-domain-daemon.nvidia.com,
// compute-domain-default-channel.nvidia.com) are always known. A channel claim that does not
// fit says whether the machine has no NVLink clique or the domain spans more nodes than it has.
package check
