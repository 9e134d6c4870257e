package gpudra

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/mig"
)

// Counter names of a GPU's counter set in dynamic MIG mode. Memory slices are the unit NVML
// places GPU instances on; the others encode the rules that placements alone do not.
const (
	// CounterComputeSlices counts compute slices (GPCs): 7 on A100/H100/B200, 4 on A30.
	CounterComputeSlices = "compute-slices"
	// CounterMediaShared is consumed by every profile that uses the shared media engines (all but
	// "-me" profiles); a "+me.all" profile consumes all of it, so it excludes every profile except
	// "-me" ones, as NVML documents.
	CounterMediaShared = "media-shared"
	// CounterMediaExtensions is the GPU's single set of JPEG/OFA engines: every "+me" profile
	// consumes it, so at most one "+me" instance exists per GPU whatever its size.
	CounterMediaExtensions = "media-extensions"
)

// CounterSetName is the name of the counter set of the GPU with the given minor.
func CounterSetName(minor int) string { return fmt.Sprintf("gpu-%d-counter-set", minor) }

// MemorySliceCounter is the counter of one memory slice.
func MemorySliceCounter(i int) string { return fmt.Sprintf("memory-slice-%d", i) }

// WithDynamicMIG publishes, for each MIG-capable GPU, every GPU-instance profile at every
// placement the MIG catalog allows as a partitionable device, plus the full GPU while it has no MIG
// devices. A counter set per GPU makes the scheduler pick only sets of devices that form a valid MIG
// layout; the kubelet plugin creates the instances at prepare time. GPUs without MIG keep being
// published as full GPUs.
func WithDynamicMIG(lookup func(productName string) (*mig.Model, error)) Option {
	return func(b *Builder) {
		if lookup == nil {
			lookup = mig.Lookup
		}
		b.migLookup = lookup
	}
}

// ConsumableMemory makes full GPUs shareable by memory: each GPU allows multiple allocations, and
// a claim asks for part of it with capacity.requests.memory. A claim that asks for nothing gets
// Default (the whole GPU when Default is zero), so exclusive claims keep working.
type ConsumableMemory struct {
	// Step is the granularity of memory requests; requests are rounded up to it. Default 1Gi.
	Step resource.Quantity
	// Default is what a claim without a memory request consumes. Zero means the whole GPU.
	Default resource.Quantity
}

// WithConsumableMemory publishes full GPUs (not MIG devices, not GPUs partitioned by dynamic MIG)
// with consumable memory capacity.
func WithConsumableMemory(c ConsumableMemory) Option {
	return func(b *Builder) { b.consumable = &c }
}

func (c *ConsumableMemory) apply(d *resourceapi.Device, memBytes uint64) {
	step := c.Step
	if step.IsZero() {
		step = resource.MustParse("1Gi")
	}
	total := int64(memBytes) / step.Value() * step.Value()
	def := c.Default
	if def.IsZero() || def.Value() > total {
		def = *resource.NewQuantity(total, resource.BinarySI)
	}
	maxQ := resource.NewQuantity(total, resource.BinarySI)
	d.AllowMultipleAllocations = ptrTo(true)
	memCap := d.Capacity[CapMemory]
	memCap.RequestPolicy = &resourceapi.CapacityRequestPolicy{
		Default: &def,
		ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min:  &step,
			Max:  maxQ,
			Step: &step,
		},
	}
	d.Capacity[CapMemory] = memCap
	// Every other capacity needs a policy too, or each share would consume all of it. SMs are not
	// partitioned by memory shares: a share consumes none unless it asks.
	for name, c := range d.Capacity {
		if name == CapMemory || c.RequestPolicy != nil {
			continue
		}
		zero := resource.MustParse("0")
		c.RequestPolicy = &resourceapi.CapacityRequestPolicy{
			Default:    &zero,
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &zero, Max: ptrTo(c.Value.DeepCopy())},
		}
		d.Capacity[name] = c
	}
}

func ptrTo[T any](v T) *T { return &v }

// dynamicMIGDevices returns the partitionable devices (and what each is) and the counter set of
// one MIG-capable GPU, or nil devices when the GPU's model is not in the catalog (it is then
// published statically).
func (b *Builder) dynamicMIGDevices(inv *gpu.Inventory, g *gpu.GPU) ([]resourceapi.Device, []PublishedDevice, resourceapi.CounterSet, error) {
	model, err := b.migLookup(g.ProductName)
	if err != nil {
		return nil, nil, resourceapi.CounterSet{}, nil //nolint:nilerr // unknown models fall back to static publishing
	}
	setName := CounterSetName(g.Minor)
	counters := map[string]resourceapi.Counter{}
	full := map[string]resourceapi.Counter{}
	set := func(name string, v int64) {
		counters[name] = resourceapi.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
		full[name] = counters[name]
	}
	for i := 0; i < model.MemorySlices; i++ {
		set(MemorySliceCounter(i), 1)
	}
	// Counters beyond the memory slices are published only where the model needs them: every
	// counter a device consumes costs the scheduler time on every allocation attempt.
	needs := counterNeeds(model)
	if needs.computeSlices {
		set(CounterComputeSlices, int64(model.ComputeSlices))
	}
	if needs.mediaShared {
		set(CounterMediaShared, int64(model.MemorySlices))
	}
	if needs.mediaExtensions {
		set(CounterMediaExtensions, 1)
	}
	limited := map[string]int{} // profile → instance counter name, where placements alone allow more
	for _, p := range model.Profiles {
		if p.InstanceCount < maxDisjoint(p.Placements) {
			name := instanceCounterName(p.Name)
			set(name, int64(p.InstanceCount))
			limited[p.Name] = p.InstanceCount
		}
	}
	if len(counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
		return nil, nil, resourceapi.CounterSet{}, fmt.Errorf("model %s needs %d counters, more than the API allows (%d)",
			model.Name, len(counters), resourceapi.ResourceSliceMaxCountersPerCounterSet)
	}
	cs := resourceapi.CounterSet{Name: setName, Counters: counters}

	var devs []resourceapi.Device
	var refs []PublishedDevice
	// The whole GPU is one more way to use it: the kubelet plugin turns MIG mode off to prepare
	// it. It is left out while MIG devices exist that the plugin did not create.
	if len(g.MIGDevices) == 0 {
		d := b.gpuDevice(inv, g)
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: setName, Counters: full}}
		devs = append(devs, d)
		refs = append(refs, PublishedDevice{GPU: g})
	}
	for i := range model.Profiles {
		p := &model.Profiles[i]
		consumed := map[string]resourceapi.Counter{}
		if needs.computeSlices {
			consumed[CounterComputeSlices] = qty(int64(p.ComputeSlices))
		}
		kind := mediaKind(p.Name)
		if needs.mediaShared && kind != "none" {
			if kind == "all" {
				consumed[CounterMediaShared] = qty(int64(model.MemorySlices))
			} else {
				consumed[CounterMediaShared] = qty(1)
			}
		}
		if needs.mediaExtensions && kind == "extensions" {
			consumed[CounterMediaExtensions] = qty(1)
		}
		if _, ok := limited[p.Name]; ok {
			consumed[instanceCounterName(p.Name)] = qty(1)
		}
		// Placements are published last slice first: the allocator is first-fit, so a small
		// instance lands at the end of the GPU and the low slices stay free for 3g/4g/7g, as
		// mig.Plan's least-fragmentation choice would place it.
		for k := len(p.Placements) - 1; k >= 0; k-- {
			pl := p.Placements[k]
			c := make(map[string]resourceapi.Counter, len(consumed)+pl.Size)
			for k, v := range consumed {
				c[k] = v
			}
			for i := pl.Start; i < pl.End(); i++ {
				c[MemorySliceCounter(i)] = qty(1)
			}
			attrs := b.commonAttributes(inv, g)
			attrs[AttrType] = str(DeviceTypeMIG)
			attrs[AttrProfile] = str(p.Name)
			attrs[AttrParentUUID] = str(g.UUID)
			attrs[AttrParentIndex] = intAttr(g.Index)
			devs = append(devs, resourceapi.Device{
				Name:       MIGDeviceName(g.Minor, p.Name, p.ID, pl.Start, ""),
				Attributes: attrs,
				Capacity: migCapacity(p.MemoryMiB<<20, p.Multiprocessors, p.CopyEngines, p.Decoders, p.Encoders,
					p.JpegEngines, p.OfaEngines),
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: setName, Counters: c}},
			})
			refs = append(refs, PublishedDevice{GPU: g, Partition: &Partition{Model: model, Profile: p, Placement: pl}})
		}
	}
	return devs, refs, cs, nil
}

// modelNeeds says which rules of a model the memory-slice counters do not already enforce.
type modelNeeds struct {
	// computeSlices: some set of non-overlapping placements uses more compute slices than the
	// GPU has (not so on the A100/H100/B200 tables, where a 3g instance covers 4 memory slices).
	computeSlices bool
	// mediaShared: the model has "+me.all" profiles, which exclude all but "-me" ones.
	mediaShared bool
	// mediaExtensions: the model has more than one "+me" profile, which share one set of engines.
	mediaExtensions bool
}

func counterNeeds(m *mig.Model) modelNeeds {
	var n modelNeeds
	me := 0
	// best[i]: the most compute slices non-overlapping placements within slices [0, i) can use.
	best := make([]int, m.MemorySlices+1)
	for end := 1; end <= m.MemorySlices; end++ {
		best[end] = best[end-1]
		for _, p := range m.Profiles {
			for _, pl := range p.Placements {
				if pl.End() == end && best[pl.Start]+p.ComputeSlices > best[end] {
					best[end] = best[pl.Start] + p.ComputeSlices
				}
			}
		}
	}
	n.computeSlices = best[m.MemorySlices] > m.ComputeSlices
	for _, p := range m.Profiles {
		switch mediaKind(p.Name) {
		case "all":
			n.mediaShared = true
		case "extensions":
			me++
		}
	}
	n.mediaExtensions = me > 1
	return n
}

func qty(v int64) resourceapi.Counter {
	return resourceapi.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
}

// instanceCounterName is the counter limiting the number of instances of a profile
// ("1g.5gb+me" → "instances-1g5gb-me").
func instanceCounterName(profile string) string { return "instances-" + profileLabel(profile) }

// mediaKind tells how a profile uses the GPU's media engines: "none" for "-me" profiles, "all"
// for "+me.all", "extensions" for "+me", "shared" otherwise.
func mediaKind(profile string) string {
	p, err := mig.ParseProfile(profile)
	switch {
	case err != nil:
		return "shared" // catalog names always parse; count an odd one as using the shared engines
	case p.HasAttribute(mig.AttributeMediaExtensionsAll):
		return "all"
	case p.HasNegAttribute(mig.AttributeMediaExtensions):
		return "none"
	case p.HasAttribute(mig.AttributeMediaExtensions):
		return "extensions"
	}
	return "shared"
}

// maxDisjoint is the largest number of pairwise non-overlapping placements (greedy by end, which
// is optimal for intervals).
func maxDisjoint(ps []mig.Placement) int {
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b mig.Placement) int { return a.End() - b.End() })
	n, end := 0, -1
	for _, p := range sorted {
		if p.Start >= end {
			n++
			end = p.End()
		}
	}
	return n
}
