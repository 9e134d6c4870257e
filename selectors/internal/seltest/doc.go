// Package seltest holds the fixtures the tests of every selectors package share: fake machines
// published as the driver publishes them, the seed manifests (selectors/testdata/seeds) and the
// seed workloads (examples/deploy/workloads), the CEL expressions found in them, the evaluation
// test's expressions, and synthetic GPUs no fake machine has. Only tests import it.
//
// # Fake machines
//
//	for _, m := range seltest.Machines() {
//		devices := m.Devices(t) // dgx-a100-40gb, with static and dynamic MIG, dgx-h100, l4x8, ...
//		...
//	}
//	slices := seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}.Slices(t)
package seltest
