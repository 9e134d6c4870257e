// Package slicetest reads, for tests, what a set of ResourceSlices uses: the optional
// resource.k8s.io features their fields need (FeaturesIn) and how many devices of each kind
// they publish (DeviceKinds). Both read the slices alone, independently of how gpudra built
// them, so that tests of the builder and of the plugin can judge its output by the API's fields.
//
//	if got := slicetest.FeaturesIn(slices); len(got) != 0 {
//		t.Errorf("a gated server would drop %v", got)
//	}
package slicetest
