// Package request analyzes the requests of a claim for the selectors packages that judge them
// (lint's rules, the policy, check's explanations): the class and selectors that apply, the
// device types and MIG profiles a request can select — named in its selectors, and published by
// the machine's devices it matches — and the sharing strategy the driver will apply.
//
// # Analyzing a claim
//
//	classes := request.KnownClasses(driver, extraClasses, objs)
//	for _, ri := range request.Of(spec, field.NewPath("spec"), classes) {
//		ri.Analyze(ctx, compiler, driver, devices)
//		fmt.Println(ri.Name, ri.Describe(), ri.IsMIG(), text.SortedKeys(ri.Profiles))
//	}
package request
