package finding_test

import (
	"fmt"

	"github.com/gpudra/gpudra/selectors/finding"
)

// Example formats a finding as lint and check print it, and decides on a set of findings.
func Example() {
	findings := []finding.Finding{
		{Severity: finding.SeverityInfo, Rule: finding.RuleUpgrade, Object: "ResourceClaim default/gpu",
			Message: "resource.k8s.io/v1beta1 converted to resource.k8s.io/v1"},
		{Severity: finding.SeverityError, Rule: finding.RuleNameAsDomain, Object: "DeviceClass big-gpu",
			Field: "spec.selectors[0].cel.expression", Line: 1, Column: 38,
			Message:    `device.attributes['memory'] reads the attribute domain "memory"`,
			Suggestion: "memory is a capacity of gpu.nvidia.com", Fixed: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40000Mi')) >= 0"},
	}
	for _, f := range findings {
		fmt.Println(f)
	}
	fmt.Println(finding.HasErrors(findings), finding.HasErrors(findings[:1]))
	// Output:
	// info [upgrade] ResourceClaim default/gpu: resource.k8s.io/v1beta1 converted to resource.k8s.io/v1
	// error [name-as-domain] DeviceClass big-gpu spec.selectors[0].cel.expression:1:38: device.attributes['memory'] reads the attribute domain "memory" (fix: memory is a capacity of gpu.nvidia.com)
	// true false
}
