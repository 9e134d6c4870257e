// Package finding is the vocabulary the selectors packages report in: a Finding is one problem
// in a manifest or an expression, with a Severity, the Rule that found it, where it is and,
// when the fix is mechanical, the corrected expression.
//
// # Rules
//
// The Rule* constants name every check of selectors/lint (RuleAttributeIsCapacity,
// RuleUnknownProfile, ...), of the upgrade (RuleUpgrade) and of the API-server checks of
// selectors/check (RuleNotServed, RuleInvalidName, ...). They are stable: tools may filter on
// them.
//
// # Reading findings
//
//	for _, f := range findings {
//		fmt.Println(f) // error [name-as-domain] ResourceClaim ml/x spec.devices...:1:38: ... (fix: ...)
//		if f.Fixed != "" {
//			// a corrected expression that compiles
//		}
//	}
//	if finding.HasErrors(findings) {
//		os.Exit(1)
//	}
package finding
