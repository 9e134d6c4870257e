package gpudra

import "slices"

// Feature is an optional part of the ResourceSlice API, named after the Kubernetes feature gate
// that guards it. An API server with the gate off (or older than the feature) does not reject a
// slice that uses it: it silently drops the feature's fields when the slice is written, so a
// driver must not publish them there (see draplugin.NegotiateFeatures).
type Feature string

// The optional ResourceSlice features a gpudra driver can use. The values are the feature gate
// names, as resourceslice.DroppedFieldsError.DisabledFeatures reports them.
const (
	// FeaturePartitionableDevices guards spec.sharedCounters, spec.perDeviceNodeSelection and
	// a device's consumesCounters (and per-device node selection): dynamic MIG needs it.
	FeaturePartitionableDevices Feature = "DRAPartitionableDevices"
	// FeatureConsumableCapacity guards a device's allowMultipleAllocations and the requestPolicy
	// of its capacities: consumable memory needs it.
	FeatureConsumableCapacity Feature = "DRAConsumableCapacity"
	// FeatureDeviceTaints guards a device's taints: health taints need it.
	FeatureDeviceTaints Feature = "DRADeviceTaints"
	// FeatureDeviceBindingConditions guards a device's bindingConditions,
	// bindingFailureConditions and bindsToNode. The Builder publishes none.
	FeatureDeviceBindingConditions Feature = "DRADeviceBindingConditions"
)

// OptionalFeatures returns every Feature, in a fixed order.
func OptionalFeatures() []Feature {
	return []Feature{FeaturePartitionableDevices, FeatureConsumableCapacity, FeatureDeviceTaints, FeatureDeviceBindingConditions}
}

// WithoutFeatures keeps the builder from publishing any field of the given features, whatever
// the other options ask and in whatever order they are given, so that an API server with those
// gates off stores the slices exactly as built:
//
//   - FeaturePartitionableDevices turns dynamic MIG off: MIG-capable GPUs are published as they
//     are partitioned now, as static MIG devices, or as full GPUs when MIG is off. It turns
//     passthrough (WithPassthrough) off too: its exclusivity needs counters.
//   - FeatureConsumableCapacity turns consumable memory off: full GPUs are exclusive.
//   - FeatureDeviceTaints drops every WithDeviceTaints source.
//   - FeatureDeviceBindingConditions changes nothing (the builder publishes none).
//
// Other values have no effect.
func WithoutFeatures(features ...Feature) Option {
	return func(b *Builder) { b.without = append(b.without, features...) }
}

// degrade applies WithoutFeatures once every option has run.
func (b *Builder) degrade() {
	for _, f := range b.without {
		switch f {
		case FeaturePartitionableDevices:
			b.migLookup, b.migOwned, b.migProfiles, b.passthrough = nil, nil, nil, nil
		case FeatureConsumableCapacity:
			b.consumable = nil
		case FeatureDeviceTaints:
			b.taints = nil
		}
	}
}

// Features returns the optional features the builder's options make it use, in the order of
// OptionalFeatures: partitionable devices with dynamic MIG or passthrough, consumable capacity with consumable
// memory, device taints with any WithDeviceTaints source. Whether a given inventory puts the
// fields in its slices depends on its GPUs (dynamic MIG needs MIG-capable ones; a taint source
// may taint nothing).
func (b *Builder) Features() []Feature {
	var out []Feature
	if b.migLookup != nil || b.passthrough != nil {
		out = append(out, FeaturePartitionableDevices)
	}
	if b.consumable != nil {
		out = append(out, FeatureConsumableCapacity)
	}
	if len(b.taints) > 0 {
		out = append(out, FeatureDeviceTaints)
	}
	return slices.Clip(out)
}
