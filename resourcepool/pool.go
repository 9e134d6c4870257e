package resourcepool

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Pool is what a driver publishes for one node: one pool's slices in publishing order.
type Pool struct {
	// Name is the pool name, usually the node name.
	Name string
	// Slices are the pool's slices: shared counters first, in slices of their own, then devices.
	Slices []Slice
}

// Slice is the content of one ResourceSlice.
type Slice struct {
	// Devices are the slice's devices (spec.devices).
	Devices []resourceapi.Device
	// SharedCounters are the slice's counter sets (spec.sharedCounters).
	SharedCounters []resourceapi.CounterSet
}

// Option configures New.
type Option func(*config)

type config struct {
	maxDevices  int
	counterSets []resourceapi.CounterSet
}

// WithMaxDevicesPerSlice lowers the number of devices per slice below the API limits
// (resourceapi.ResourceSliceMaxDevices, or ResourceSliceMaxDevicesWithAdvancedFeatures when a
// device uses taints, counters or list attributes). Values above the limit, and 0, mean the
// limit.
func WithMaxDevicesPerSlice(n int) Option { return func(c *config) { c.maxDevices = n } }

// WithSharedCounters publishes counter sets that devices consume (partitionable devices); they
// come first, in slices of their own (at most resourceapi.ResourceSliceMaxCounterSets each).
func WithSharedCounters(sets []resourceapi.CounterSet) Option {
	return func(c *config) { c.counterSets = sets }
}

// New returns the pool named name with the devices in their order, chunked into slices within
// the API limits. An empty pool is one empty slice: "no devices" differs from "no pool". Device
// names are not checked (a builder that makes them checks them once, not on every publish):
// check devices from elsewhere with ValidateDevices.
func New(name string, devices []resourceapi.Device, opts ...Option) (*Pool, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if err := ValidatePoolName(name); err != nil {
		return nil, err
	}
	pool := &Pool{Name: name}
	for start := 0; start < len(cfg.counterSets); start += resourceapi.ResourceSliceMaxCounterSets {
		end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(cfg.counterSets))
		pool.Slices = append(pool.Slices, Slice{SharedCounters: cfg.counterSets[start:end]})
	}
	limit := sliceLimit(devices, cfg.maxDevices)
	for start := 0; start < len(devices); start += limit {
		end := min(start+limit, len(devices))
		pool.Slices = append(pool.Slices, Slice{Devices: devices[start:end]})
	}
	if len(pool.Slices) == 0 {
		pool.Slices = []Slice{{}}
	}
	return pool, nil
}

// ValidateDevices checks what the API server checks of every device's name in a pool: a DNS
// label, unique in the pool. The error names the device's index.
func ValidateDevices(devices []resourceapi.Device) error {
	seen := make(map[string]int, len(devices))
	for i := range devices {
		name := devices[i].Name
		if problems := validation.IsDNS1123Label(name); len(problems) > 0 {
			return fmt.Errorf("devices[%d]: name %q: %s (a device name is a DNS label such as accel-0)", i, name, strings.Join(problems, "; "))
		}
		if j, dup := seen[name]; dup {
			return fmt.Errorf("devices[%d]: name %q is also the name of devices[%d]: device names are unique in a pool", i, name, j)
		}
		seen[name] = i
	}
	return nil
}

// sliceLimit is the number of devices per slice: the API's limit, lower when a device uses an
// advanced feature, and lower still when max asks for it.
func sliceLimit(devices []resourceapi.Device, max int) int {
	limit := resourceapi.ResourceSliceMaxDevices
	for i := range devices {
		if len(devices[i].Taints) > 0 || len(devices[i].ConsumesCounters) > 0 || hasListAttribute(&devices[i]) {
			limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			break
		}
	}
	if max > 0 && max < limit {
		limit = max
	}
	return limit
}

// hasListAttribute reports whether d has a list-valued attribute.
func hasListAttribute(d *resourceapi.Device) bool {
	for _, a := range d.Attributes {
		if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
			return true
		}
	}
	return false
}
