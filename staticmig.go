package gpudra

import (
	"cmp"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// WithMIGDevicesByProfile publishes a node's existing (static) MIG devices grouped by profile,
// smallest first (by memory slices, then memory, then multiprocessors, then name), each group
// in GPU order, after the node's full GPUs; by default each GPU's MIG devices follow each
// other, GPU by GPU.
//
// The scheduler's allocator tries a node's devices in publishing order and evaluates the
// request's DeviceClass and claim selectors on every free device it passes. A claim for one
// profile therefore stops at its group instead of evaluating both selectors on every other
// profile's free devices of the GPUs before the one it lands on: on an all-balanced DGX A100,
// a 1g.5gb claim passes no 2g.10gb or 3g.20gb device at all. The device a profile-selecting
// claim gets is the same as without the option (the first free device of that profile in GPU
// order); a claim that accepts any MIG device now gets the smallest free one. The cost moves
// to the larger profiles: on a node with free small devices, a claim for a large profile
// evaluates the selectors on every free device of the smaller groups first. For nodes whose
// claims mostly ask for the small profiles (docs/benchmarks.md, "Publishing options and the
// allocator's cost"). Dynamic MIG partitions are always grouped by profile; the option
// cannot be combined with WithDynamicMIG.
func WithMIGDevicesByProfile() Option { return func(b *Builder) { b.migByProfile = true } }

// ownedDevice is a device to publish, what it is, and who it belongs to (for errors).
type ownedDevice struct {
	device resourceapi.Device
	ref    PublishedDevice
	owner  string
}

// groupMIGByProfile reorders devices for WithMIGDevicesByProfile, in place: the devices that
// are not MIG devices first, in their order, then the MIG devices grouped by profile, smallest
// profile first, each group in the order the devices had.
func groupMIGByProfile(devices []ownedDevice) {
	key := func(o ownedDevice) (bool, int, uint64, int, string) {
		m := o.ref.MIG
		if m == nil {
			return false, 0, 0, 0, ""
		}
		return true, m.Placement.Size, m.MemoryBytes, m.Multiprocessors, m.Profile
	}
	slices.SortStableFunc(devices, func(x, y ownedDevice) int {
		xm, xs, xb, xp, xn := key(x)
		ym, ys, yb, yp, yn := key(y)
		if xm != ym {
			if !xm {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(xs, ys), cmp.Compare(xb, yb), cmp.Compare(xp, yp), cmp.Compare(xn, yn))
	})
}
