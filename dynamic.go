package gpudra

import (
	"cmp"
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
// placement its MIG geometry allows as a partitionable device, plus the full GPU while no foreign
// MIG instance is on it. A counter set per GPU makes the scheduler pick only sets of devices that
// form a valid MIG layout; the kubelet plugin creates the instances at prepare time. GPUs without
// MIG keep being published as full GPUs.
//
// With WithDynamicMIGOwned, MIG instances present in the inventory that the driver did not
// create are foreign: placements that overlap one, or that NVML would refuse beside it, are not
// published, and the counters it uses are taken out of the GPU's counter set.
//
// The scheduler's allocator takes the first device that fits, so the publishing order is the
// placement policy. Partitions are published grouped by profile, each group in the order
// mig.Plan would fill the node beside the instances present (see orderPartitions): the first claim
// of a profile lands where Plan puts it, small claims fill partly used GPUs before empty ones, and
// whole GPUs stay free for 7g claims. The order depends on the instances present, so a driver
// that rebuilds its slices when it creates or destroys instances keeps it current; device names
// never change.
//
// A GPU's geometry is the one it reported when enumerated (gpu.GPU.MIGGeometry), so published
// memory, counts and placements are the hardware's; lookup (nil: mig.Lookup, the catalog) serves
// GPUs enumerated without it, such as inventories loaded from a file.
func WithDynamicMIG(lookup func(productName string) (*mig.Model, error)) Option {
	return func(b *Builder) {
		if lookup == nil {
			lookup = mig.Lookup
		}
		b.migLookup = lookup
	}
}

// WithDynamicMIGOwned tells dynamic MIG which existing MIG devices the driver created itself (for
// claims it prepared, as its checkpoint records them): those stay published as the partitions
// they are, and the other placements are only ordered around them. Every other MIG device in the
// inventory is foreign (see WithDynamicMIG), and the full GPU is published again once no foreign
// one is left. Without this option nothing is withdrawn (every existing instance is taken as the
// driver's) and the full GPU is left out while any MIG device exists.
func WithDynamicMIGOwned(owned func(g *gpu.GPU, d *gpu.MIGDevice) bool) Option {
	return func(b *Builder) { b.migOwned = owned }
}

// WithDynamicMIGProfiles limits dynamic MIG to the named GPU-instance profiles (as mig formats
// them: "1g.5gb", "3g.20gb", "1g.5gb+me"); the other profiles are not published, so claims
// cannot ask for them. Full GPUs are published as without it. Every device of a node is work in
// each scheduling attempt on it (the scheduler converts and checks all of them), so a cluster
// that uses a few profiles schedules faster publishing only those. Names no GPU of the node
// knows are ignored.
func WithDynamicMIGProfiles(profiles ...string) Option {
	return func(b *Builder) {
		b.migProfiles = map[string]bool{}
		for _, p := range profiles {
			b.migProfiles[p] = true
		}
	}
}

// WithPartitionsFirst publishes the dynamic MIG partitions of a node before its full GPUs
// (default: after them). The scheduler's allocator tries a node's devices in the order they are
// published and checks each against the request's DeviceClass before anything else. With the
// partitions first, a MIG claim reaches a fitting partition without evaluating the MIG class's
// selector on every full GPU; in exchange a full-GPU claim evaluates the GPU class's selector on
// every partition before it reaches a GPU. For nodes whose claims are mostly MIG devices
// (docs/benchmarks.md, "Publishing options and the allocator's cost").
func WithPartitionsFirst() Option { return func(b *Builder) { b.partitionsFirst = true } }

// WithOneMediaExtensionPlacement publishes each dynamic MIG profile that uses the GPU's media
// extensions ("+me", "+me.all") at one placement per GPU, the one with the highest start,
// instead of at every placement. The extensions exist once per GPU (CounterMediaExtensions), so
// at most one such instance exists at a time; the other placements only add devices that the
// scheduler converts and checks in every attempt on the node (on an A100 40GB, 6 of a GPU's 25
// partitions: 1g.5gb+me at 7 placements becomes 1). The trade-off: a claim for such a profile fits a GPU only while that one
// placement's memory slices are free; where a smaller instance already uses them, the claim
// goes to another GPU (or waits) although another placement on the same GPU is free.
func WithOneMediaExtensionPlacement() Option {
	return func(b *Builder) { b.oneMediaExtensionPlacement = true }
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

// dynamicModel returns the MIG model of a GPU for dynamic publishing: the geometry the GPU
// reported when it was enumerated (gpu.GPU.MIGGeometry), else the lookup's. It returns nil when
// the GPU is to be published statically (neither knows the product).
func (b *Builder) dynamicModel(g *gpu.GPU) *mig.Model {
	if g.MIGGeometry != nil && g.MIGGeometry.Model != nil {
		return g.MIGGeometry.Model
	}
	m, err := b.migLookup(g.ProductName)
	if err != nil {
		return nil // unknown models fall back to static publishing
	}
	return m
}

// dynamicMIG is what one MIG-capable GPU publishes in dynamic mode.
type dynamicMIG struct {
	gpu      int // GPU index
	owner    string
	model    *mig.Model
	ranker   *mig.Ranker
	layout   []mig.Instance // the GPU instances present, as the model explains them
	full     *resourceapi.Device
	parts    []partition
	counters resourceapi.CounterSet
}

// partition is one profile at one placement, published as a partitionable device.
type partition struct {
	profile   string
	placement mig.Placement
	device    resourceapi.Device
	ref       PublishedDevice
}

// dynamicMIGDevices returns what one MIG-capable GPU publishes, or nil when the GPU has no model
// (it is then published statically).
func (b *Builder) dynamicMIGDevices(inv *gpu.Inventory, g *gpu.GPU) (*dynamicMIG, error) {
	model := b.dynamicModel(g)
	if model == nil {
		return nil, nil
	}
	present := existingInstances(model, g, b.migOwned)
	cc := newMIGCounters(model)
	if len(cc.full) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
		return nil, fmt.Errorf("model %s needs %d counters, more than the API allows (%d)",
			model.Name, len(cc.full), resourceapi.ResourceSliceMaxCountersPerCounterSet)
	}
	setName := CounterSetName(g.Minor)
	out := &dynamicMIG{
		gpu: g.Index, owner: fmt.Sprintf("GPU %d (%s)", g.Index, g.UUID), model: model, layout: present.all,
		counters: resourceapi.CounterSet{Name: setName, Counters: cc.remaining(model, present.foreign)},
	}
	var err error
	if out.ranker, err = mig.NewRanker(model); err != nil {
		return nil, err
	}
	if _, err := out.ranker.Candidates(out.layout); err != nil {
		out.layout = nil // an inventory the model cannot explain: rank as on an empty GPU
	}
	// The whole GPU is one more way to use it: the kubelet plugin turns MIG mode off to prepare
	// it. It is left out while MIG instances exist that the plugin did not create (or may not
	// have, when WithDynamicMIGOwned does not say); those it did create use counters the whole
	// GPU needs, so the allocator cannot give it out beside them.
	if len(g.MIGDevices) == 0 || (b.migOwned != nil && len(present.blocked) == 0) {
		d := b.gpuDevice(inv, g)
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: setName, Counters: cc.full}}
		out.full = &d
	}
	for i := range model.Profiles {
		p := &model.Profiles[i]
		if b.migProfiles != nil && !b.migProfiles[p.Name] {
			continue
		}
		for _, pl := range b.placements(p) {
			if present.blocks(model, p.Name, pl) {
				continue
			}
			out.parts = append(out.parts, partition{profile: p.Name, placement: pl, device: b.partition(inv, g, p, pl, setName, cc),
				ref: PublishedDevice{GPU: g, Partition: &Partition{Model: model, Profile: p, Placement: pl}}})
		}
	}
	return out, nil
}

// placements are the placements dynamic MIG publishes profile p at: all of them, or with
// WithOneMediaExtensionPlacement the one with the highest start for a profile that uses the
// media extensions.
func (b *Builder) placements(p *mig.GIProfile) []mig.Placement {
	if !b.oneMediaExtensionPlacement || len(p.Placements) == 0 {
		return p.Placements
	}
	if k := mediaKind(p.Name); k != "extensions" && k != "all" {
		return p.Placements
	}
	last := slices.MaxFunc(p.Placements, func(a, c mig.Placement) int { return cmp.Compare(a.Start, c.Start) })
	return []mig.Placement{last}
}

// orderPartitions returns the dynamic MIG partitions of a node in publishing order, for the
// scheduler's first-fit allocator. Partitions are grouped by profile (in the order profiles first
// appear); within a profile the order is the sequence of choices mig.Plan would make for claims
// of that profile arriving one after another: each next partition is the one, on any GPU, with
// the lowest mig.PlacementCost beside the instances present and the ones chosen before it (ties:
// the GPU with more instances, then fewer free memory slices, the lower start, the lower GPU
// index). So the first claim lands where Plan puts it, small claims fill partly used GPUs before
// empty ones, and a burst of claims between two publications consolidates GPU by GPU. Partitions
// that cannot be chosen that way (they do not fit now) follow in the order of an empty GPU.
func orderPartitions(gpus []*dynamicMIG) []partitionOf {
	var profiles []string
	for _, d := range gpus {
		for _, p := range d.parts {
			if !slices.Contains(profiles, p.profile) {
				profiles = append(profiles, p.profile)
			}
		}
	}
	var out []partitionOf
	for _, profile := range profiles {
		out = append(out, orderProfile(gpus, profile)...)
	}
	return out
}

// partitionOf is a partition and the GPU it belongs to.
type partitionOf struct {
	partition
	owner string
}

// orderProfile is orderPartitions for the partitions of one profile.
func orderProfile(gpus []*dynamicMIG, profile string) []partitionOf {
	o := &profileOrder{gpus: gpus, profile: profile, virtual: make([][]mig.Instance, len(gpus)), costs: make([]map[mig.Placement]mig.Candidate, len(gpus))}
	var left []candidate
	for gi, d := range gpus {
		o.virtual[gi] = slices.Clone(d.layout)
		for _, p := range d.parts {
			if p.profile == profile {
				left = append(left, candidate{gi, p})
			}
		}
	}
	var out []partitionOf
	for len(left) > 0 {
		best := -1
		for k, c := range left {
			if o.cost(c).Fits && (best < 0 || o.compare(c, left[best]) < 0) {
				best = k
			}
		}
		if best < 0 {
			break
		}
		c := left[best]
		out = append(out, partitionOf{c.part, gpus[c.gpu].owner})
		o.choose(c)
		left = slices.Delete(left, best, best+1)
	}
	// What cannot be chosen now follows in the order it would have on an empty GPU.
	o.virtual = make([][]mig.Instance, len(gpus))
	o.costs = make([]map[mig.Placement]mig.Candidate, len(gpus))
	slices.SortStableFunc(left, o.compareEmpty)
	for _, c := range left {
		out = append(out, partitionOf{c.part, gpus[c.gpu].owner})
	}
	return out
}

// candidate is a partition of one GPU (an index into profileOrder.gpus).
type candidate struct {
	gpu  int
	part partition
}

// profileOrder ranks the partitions of one profile as if claims of that profile took them one
// after another: virtual holds each GPU's instances plus the partitions chosen so far.
type profileOrder struct {
	gpus    []*dynamicMIG
	profile string
	virtual [][]mig.Instance
	costs   []map[mig.Placement]mig.Candidate // per GPU, under virtual; nil when stale
}

func (o *profileOrder) cost(c candidate) mig.Candidate {
	if o.costs[c.gpu] == nil {
		o.costs[c.gpu] = map[mig.Placement]mig.Candidate{}
		cands, _ := o.gpus[c.gpu].ranker.Candidates(o.virtual[c.gpu], o.profile)
		for _, x := range cands {
			o.costs[c.gpu][x.Placement] = x
		}
	}
	return o.costs[c.gpu][c.part.placement]
}

func (o *profileOrder) choose(c candidate) {
	pl := c.part.placement
	o.virtual[c.gpu] = append(o.virtual[c.gpu], mig.Instance{Profile: o.profile, Placement: &pl})
	o.costs[c.gpu] = nil
}

func (o *profileOrder) free(gi int) int {
	n := o.gpus[gi].model.MemorySlices
	for _, in := range o.virtual[gi] {
		n -= in.Placement.Size
	}
	return n
}

// compare orders two candidates that fit: the lower mig.PlacementCost, then the GPU with more
// instances (it is the one least likely to drain soon), then the one with fewer free memory
// slices, then the lower start (Plan's tie-break), then the lower GPU index.
func (o *profileOrder) compare(a, b candidate) int {
	return cmp.Or(slices.Compare(o.cost(a).Cost, o.cost(b).Cost),
		cmp.Compare(len(o.virtual[b.gpu]), len(o.virtual[a.gpu])),
		cmp.Compare(o.free(a.gpu), o.free(b.gpu)),
		cmp.Compare(a.part.placement.Start, b.part.placement.Start),
		cmp.Compare(o.gpus[a.gpu].gpu, o.gpus[b.gpu].gpu))
}

// compareEmpty orders candidates as on empty GPUs (mig.PlacementOrder's order), then by GPU
// index. It expects o.virtual to be empty.
func (o *profileOrder) compareEmpty(a, b candidate) int {
	return cmp.Or(o.cost(a).Compare(o.cost(b)), cmp.Compare(o.gpus[a.gpu].gpu, o.gpus[b.gpu].gpu))
}

// partition is the device of one profile at one placement.
func (b *Builder) partition(inv *gpu.Inventory, g *gpu.GPU, p *mig.GIProfile, pl mig.Placement, setName string, cc *migCounters) resourceapi.Device {
	attrs := b.commonAttributes(inv, g)
	attrs[AttrType] = str(DeviceTypeMIG)
	attrs[AttrProfile] = str(p.Name)
	attrs[AttrParentUUID] = str(g.UUID)
	attrs[AttrParentIndex] = intAttr(g.Index)
	return resourceapi.Device{
		Name:       MIGDeviceName(MIGName{ParentMinor: g.Minor, Profile: p.Name, GIProfileID: p.ID, PlacementStart: pl.Start}),
		Attributes: attrs,
		Capacity: migCapacity(p.MemoryMiB<<20, p.Multiprocessors, p.CopyEngines, p.Decoders, p.Encoders,
			p.JpegEngines, p.OfaEngines),
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: setName, Counters: cc.consumed(p, pl)}},
	}
}

// migCounters is the counter set of one GPU model: what exists and what each device consumes.
type migCounters struct {
	needs   modelNeeds
	full    map[string]resourceapi.Counter
	limited map[string]bool // profiles with an instance counter
	slices  int
}

func newMIGCounters(model *mig.Model) *migCounters {
	cc := &migCounters{needs: counterNeeds(model), full: map[string]resourceapi.Counter{}, limited: map[string]bool{}, slices: model.MemorySlices}
	for i := 0; i < model.MemorySlices; i++ {
		cc.full[MemorySliceCounter(i)] = qty(1)
	}
	// Counters beyond the memory slices are published only where the model needs them: every
	// counter a device consumes costs the scheduler time on every allocation attempt.
	if cc.needs.computeSlices {
		cc.full[CounterComputeSlices] = qty(int64(model.ComputeSlices))
	}
	if cc.needs.mediaShared {
		cc.full[CounterMediaShared] = qty(int64(model.MemorySlices))
	}
	if cc.needs.mediaExtensions {
		cc.full[CounterMediaExtensions] = qty(1)
	}
	for _, p := range model.Profiles {
		if p.InstanceCount < maxDisjoint(p.Placements) {
			cc.full[instanceCounterName(p.Name)] = qty(int64(p.InstanceCount))
			cc.limited[p.Name] = true
		}
	}
	return cc
}

// shared is what an instance of p consumes besides memory slices.
func (cc *migCounters) shared(p *mig.GIProfile) map[string]int64 {
	out := map[string]int64{}
	if cc.needs.computeSlices {
		out[CounterComputeSlices] = int64(p.ComputeSlices)
	}
	kind := mediaKind(p.Name)
	if cc.needs.mediaShared && kind != "none" {
		if kind == "all" {
			out[CounterMediaShared] = int64(cc.slices)
		} else {
			out[CounterMediaShared] = 1
		}
	}
	if cc.needs.mediaExtensions && kind == "extensions" {
		out[CounterMediaExtensions] = 1
	}
	if cc.limited[p.Name] {
		out[instanceCounterName(p.Name)] = 1
	}
	return out
}

// consumed is what the device of p at pl consumes.
func (cc *migCounters) consumed(p *mig.GIProfile, pl mig.Placement) map[string]resourceapi.Counter {
	c := map[string]resourceapi.Counter{}
	for k, v := range cc.shared(p) {
		c[k] = qty(v)
	}
	for i := pl.Start; i < pl.End(); i++ {
		c[MemorySliceCounter(i)] = qty(1)
	}
	return c
}

// remaining is the counter set with what the foreign instances use taken out (memory slices stay:
// no published device covers a foreign instance's slices).
func (cc *migCounters) remaining(model *mig.Model, foreign []mig.Instance) map[string]resourceapi.Counter {
	left := map[string]int64{}
	for k, v := range cc.full {
		left[k] = v.Value.Value()
	}
	for _, in := range foreign {
		if p, ok := model.Profile(in.Profile); ok {
			for k, v := range cc.shared(p) {
				left[k] = max(0, left[k]-v)
			}
		}
	}
	out := make(map[string]resourceapi.Counter, len(left))
	for k, v := range left {
		out[k] = qty(v)
	}
	return out
}

// presentInstances are the GPU instances that exist on a GPU, as placed mig Instances.
type presentInstances struct {
	all     []mig.Instance // owned and foreign, known profiles only
	foreign []mig.Instance // known profiles only
	blocked []mig.Placement
}

// existingInstances reads the GPU instances of g's MIG devices (compute instances of one GPU
// instance count once) and splits off those the driver did not create.
func existingInstances(model *mig.Model, g *gpu.GPU, owned func(*gpu.GPU, *gpu.MIGDevice) bool) presentInstances {
	var out presentInstances
	seen := map[[2]int]bool{}
	for i := range g.MIGDevices {
		d := &g.MIGDevices[i]
		p, ok := model.ProfileByID(d.GIProfileID)
		if !ok {
			p, ok = model.Profile(d.Profile)
		}
		size := d.Placement.Size
		if ok {
			size = p.MemorySlices()
		}
		key := [2]int{d.Placement.Start, size}
		if seen[key] {
			continue
		}
		seen[key] = true
		pl := mig.Placement{Start: d.Placement.Start, Size: size}
		isOwned := owned == nil || owned(g, d)
		if !isOwned {
			out.blocked = append(out.blocked, pl)
		}
		if !ok {
			continue // an unknown profile only blocks its slices
		}
		in := mig.Instance{Profile: p.Name, Placement: &pl}
		out.all = append(out.all, in)
		if !isOwned {
			out.foreign = append(out.foreign, in)
		}
	}
	return out
}

// blocks reports whether the placement pl of profile must not be published: it overlaps a
// foreign instance, or NVML would refuse it beside the foreign instances (instance counts, media
// engines).
func (pi presentInstances) blocks(model *mig.Model, profile string, pl mig.Placement) bool {
	for _, f := range pi.blocked {
		if f.Overlaps(pl) {
			return true
		}
	}
	if len(pi.foreign) == 0 {
		return false
	}
	_, err := mig.Validate(model, append(slices.Clone(pi.foreign), mig.Instance{Profile: profile, Placement: &pl}))
	return err != nil
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
