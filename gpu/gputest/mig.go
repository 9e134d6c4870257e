package gputest

import (
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpudra/gpudra/mig"
)

// GpuInstance is a fake MIG GPU instance. It implements nvml.GpuInstance on go-nvml's
// mock.GpuInstance.
type GpuInstance struct {
	mock.GpuInstance

	d         *Device
	id        uint32
	profile   *mig.GIProfile
	placement mig.Placement
	cis       map[uint32]*ComputeInstance
	destroyed bool
}

// ComputeInstance is a fake MIG compute instance. It implements nvml.ComputeInstance on
// go-nvml's mock.ComputeInstance.
type ComputeInstance struct {
	mock.ComputeInstance

	gi        *GpuInstance
	id        uint32
	profile   *mig.ComputeProfile
	start     int // first compute slice
	destroyed bool
	dev       *MIGDeviceHandle
}

// MIGDeviceHandle is the MIG device handle of one compute instance, as GetMigDeviceHandleByIndex
// returns it. It implements nvml.Device on go-nvml's mock.Device.
type MIGDeviceHandle struct {
	mock.Device

	ci   *ComputeInstance
	uuid string
	// computeMode is the MIG device's own compute mode: with MIG enabled, NVML sets compute
	// modes on MIG device handles. A new instance starts in DEFAULT.
	computeMode nvml.ComputeMode
}

var (
	_ nvml.GpuInstance     = (*GpuInstance)(nil)
	_ nvml.ComputeInstance = (*ComputeInstance)(nil)
	_ nvml.Device          = (*MIGDeviceHandle)(nil)
)

func hasSuffixAttr(name, suffix string) bool { return strings.HasSuffix(name, suffix) }

// giProfileInfo is what GetGpuInstanceProfileInfo reports for p.
func giProfileInfo(p *mig.GIProfile) nvml.GpuInstanceProfileInfo {
	return nvml.GpuInstanceProfileInfo{
		Id:                  uint32(p.ID),
		SliceCount:          uint32(p.ComputeSlices),
		InstanceCount:       uint32(p.InstanceCount),
		MultiprocessorCount: uint32(p.Multiprocessors),
		CopyEngineCount:     uint32(p.CopyEngines),
		DecoderCount:        uint32(p.Decoders),
		EncoderCount:        uint32(p.Encoders),
		JpegCount:           uint32(p.JpegEngines),
		OfaCount:            uint32(p.OfaEngines),
		MemorySizeMB:        p.MemoryMiB,
	}
}

// ciProfileInfo is what GetComputeInstanceProfileInfo reports for c inside a GPU instance of
// profile p: the engines are shared by all compute instances of the GPU instance.
func ciProfileInfo(p *mig.GIProfile, c *mig.ComputeProfile) nvml.ComputeInstanceProfileInfo {
	return nvml.ComputeInstanceProfileInfo{
		Id:                    uint32(c.ID),
		SliceCount:            uint32(c.Slices),
		InstanceCount:         uint32(c.InstanceCount),
		MultiprocessorCount:   uint32(c.Multiprocessors),
		SharedCopyEngineCount: uint32(p.CopyEngines),
		SharedDecoderCount:    uint32(p.Decoders),
		SharedEncoderCount:    uint32(p.Encoders),
		SharedJpegCount:       uint32(p.JpegEngines),
		SharedOfaCount:        uint32(p.OfaEngines),
	}
}

// ciStarts returns the allowed compute-slice starts of c inside a GPU instance of profile p.
func ciStarts(p *mig.GIProfile, c *mig.ComputeProfile) []int {
	if len(c.Placements) > 0 {
		return c.Placements
	}
	var s []int
	for st := 0; c.Slices > 0 && st+c.Slices <= p.ComputeSlices; st += c.Slices {
		s = append(s, st)
	}
	return s
}

// giProfileByInfo resolves the profile an NVML call names through info.Id. The caller holds m.mu.
func (d *Device) giProfileByInfo(info *nvml.GpuInstanceProfileInfo) (*mig.GIProfile, nvml.Return) {
	if info == nil || d.geometry == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := d.geometry.ProfileByID(int(info.Id))
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return p, nvml.SUCCESS
}

// migCheck answers the MIG calls of a GPU that has no MIG, and those that need MIG mode on.
func (d *Device) migCheck(needEnabled bool) nvml.Return {
	switch {
	case !d.model.migCapable:
		return nvml.ERROR_NOT_SUPPORTED
	case needEnabled && d.migMode != nvml.DEVICE_MIG_ENABLE:
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}

// sortedGIs returns the GPU instances ordered by id. The caller holds m.mu.
func (d *Device) sortedGIs() []*GpuInstance {
	out := make([]*GpuInstance, 0, len(d.gis))
	for _, id := range sortedKeys(d.gis) {
		out = append(out, d.gis[id])
	}
	return out
}

// migDevicesLocked returns the MIG devices in index order: by GPU instance id, then compute
// instance id. The caller holds m.mu.
func (d *Device) migDevicesLocked() []*MIGDeviceHandle {
	var out []*MIGDeviceHandle
	for _, gi := range d.sortedGIs() {
		for _, id := range sortedKeys(gi.cis) {
			out = append(out, gi.cis[id].dev)
		}
	}
	return out
}

// giID numbers GPU instances the way the hardware appears to: as nodes of a binary tree over
// the memory slices, numbered from the top slice down (on an 8-slice GPU the whole GPU is 0, the
// halves at 4 and 0 are 1 and 2, quarters at 6, 4, 2, 0 are 3–6, eighths 7–14). This matches
// the 15 GPU instances per GPU that the nvidia-caps minors allow and NVIDIA's published
// examples (a 3g.20gb at 4:4 is GPU instance 1, at 0:4 instance 2); it is inferred, not
// documented. Machines whose recordings show the other order (giIDAscending: on an RTX PRO
// 6000 a 2g.48gb at 0:6 is instance 1 and 1g.24gb at 0, 3, 6, 9 are 3–6) number from the
// bottom slice up. Geometries that do not fit the tree get the lowest free id above it.
func (d *Device) giID(pl mig.Placement) uint32 {
	total := d.geometry.MemorySlices
	if total > 0 && pl.Size > 0 && total%pl.Size == 0 && pl.Start%pl.Size == 0 {
		nodes := total / pl.Size // nodes at this level of the tree
		if nodes&(nodes-1) == 0 {
			pos := nodes - 1 - pl.Start/pl.Size
			if d.m.spec.giIDAscending {
				pos = pl.Start / pl.Size
			}
			id := uint32(nodes - 1 + pos)
			if _, used := d.gis[id]; !used {
				return id
			}
		}
	}
	for id := uint32(2 * total); ; id++ {
		if _, used := d.gis[id]; !used {
			return id
		}
	}
}

// meConflict reports whether a GPU instance of profile p cannot coexist with the existing ones
// because of media-engine exclusivity: a "+me.all" instance allows only "-me" instances beside it.
func (d *Device) meConflict(p *mig.GIProfile) bool {
	allME := hasSuffixAttr(p.Name, "+me.all")
	noME := hasSuffixAttr(p.Name, "-me")
	for _, gi := range d.gis {
		if hasSuffixAttr(gi.profile.Name, "+me.all") && !noME {
			return true
		}
		if allME && !hasSuffixAttr(gi.profile.Name, "-me") {
			return true
		}
	}
	return false
}

func (d *Device) countOf(p *mig.GIProfile) int {
	n := 0
	for _, gi := range d.gis {
		if gi.profile.ID == p.ID {
			n++
		}
	}
	return n
}

func (d *Device) placementFree(pl mig.Placement) bool {
	for _, gi := range d.gis {
		if gi.placement.Overlaps(pl) {
			return false
		}
	}
	return true
}

// createGI creates a GPU instance of profile p at pl, or at the first free allowed placement
// when pl is nil, with the checks NVML makes. The caller holds m.mu.
func (d *Device) createGI(p *mig.GIProfile, pl *mig.Placement) (*GpuInstance, nvml.Return) {
	if ret := d.migCheck(true); ret != nvml.SUCCESS {
		return nil, ret
	}
	if pl != nil && !p.AllowsPlacement(*pl) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if d.countOf(p) >= p.InstanceCount || d.meConflict(p) {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	var at *mig.Placement
	if pl != nil {
		if d.placementFree(*pl) {
			at = pl
		}
	} else {
		for i := range p.Placements {
			if d.placementFree(p.Placements[i]) {
				at = &p.Placements[i]
				break
			}
		}
	}
	if at == nil {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	gi := &GpuInstance{d: d, id: d.giID(*at), profile: p, placement: *at, cis: map[uint32]*ComputeInstance{}}
	gi.setFuncs()
	d.gis[gi.id] = gi
	d.changed()
	return gi, nvml.SUCCESS
}

// remainingGIs is how many more instances of p fit now: free, mutually disjoint allowed
// placements (interval scheduling by end), capped by the instance count.
func (d *Device) remainingGIs(p *mig.GIProfile) int {
	if d.meConflict(p) {
		return 0
	}
	left := p.InstanceCount - d.countOf(p)
	var free []mig.Placement
	for _, pl := range p.Placements {
		if d.placementFree(pl) {
			free = append(free, pl)
		}
	}
	slices.SortFunc(free, func(a, b mig.Placement) int { return a.End() - b.End() })
	n, end := 0, -1
	for _, pl := range free {
		if pl.Start >= end {
			n++
			end = pl.End()
		}
	}
	return max(0, min(n, left))
}

func (gi *GpuInstance) ciProfileByInfo(info *nvml.ComputeInstanceProfileInfo) (*mig.ComputeProfile, nvml.Return) {
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	for i := range gi.profile.ComputeProfiles {
		if gi.profile.ComputeProfiles[i].ID == int(info.Id) {
			return &gi.profile.ComputeProfiles[i], nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

func (gi *GpuInstance) ciFree(start, size int) bool {
	for _, ci := range gi.cis {
		if start < ci.start+ci.profile.Slices && ci.start < start+size {
			return false
		}
	}
	return true
}

func (gi *GpuInstance) ciCount(c *mig.ComputeProfile) int {
	n := 0
	for _, ci := range gi.cis {
		if ci.profile.ID == c.ID {
			n++
		}
	}
	return n
}

// createCI creates a compute instance of profile c at compute slice *start, or at the first free
// allowed start. The caller holds m.mu.
func (gi *GpuInstance) createCI(c *mig.ComputeProfile, start *int) (*ComputeInstance, nvml.Return) {
	starts := ciStarts(gi.profile, c)
	if start != nil && !slices.Contains(starts, *start) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if gi.ciCount(c) >= c.InstanceCount {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	at := -1
	for _, s := range starts {
		if (start == nil || s == *start) && gi.ciFree(s, c.Slices) {
			at = s
			break
		}
	}
	if at < 0 {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	var id uint32
	for ; ; id++ {
		if _, used := gi.cis[id]; !used {
			break
		}
	}
	d := gi.d
	d.generation++
	ci := &ComputeInstance{gi: gi, id: id, profile: c, start: at}
	ci.dev = &MIGDeviceHandle{ci: ci, uuid: migUUID(d.uuid, gi.id, id, d.generation)}
	ci.setFuncs()
	ci.dev.setFuncs()
	gi.cis[id] = ci
	d.changed()
	return ci, nvml.SUCCESS
}

func (gi *GpuInstance) remainingCIs(c *mig.ComputeProfile) int {
	left := c.InstanceCount - gi.ciCount(c)
	n, end := 0, -1
	for _, s := range ciStarts(gi.profile, c) {
		if s >= end && gi.ciFree(s, c.Slices) {
			n++
			end = s + c.Slices
		}
	}
	return max(0, min(n, left))
}

// migGate is the device's gate that also refuses, as NVML does, a MIG call on a GPU without MIG,
// and with needEnabled one on a GPU whose MIG mode is off.
func (d *Device) migGate(needEnabled bool) gate {
	return gate{mu: &d.m.mu, enter: func(method string) nvml.Return {
		if ret := d.enter(method); ret != nvml.SUCCESS {
			return ret
		}
		return d.migCheck(needEnabled)
	}}
}

// fails is the body of a call that, once through its gate, fails with ret.
func fails[T any](ret nvml.Return) func() (T, nvml.Return) {
	return func() (T, nvml.Return) {
		var zero T
		return zero, ret
	}
}

func (d *Device) setMIGFuncs() {
	g, capable, enabled := d.gate(), d.migGate(false), d.migGate(true)
	d.GetMigModeFunc = guardPair(capable, "GetMigMode", func() (int, int, nvml.Return) { return d.migMode, d.migMode, nvml.SUCCESS })
	d.SetMigModeFunc = guard1(capable, "SetMigMode", d.setMigMode)
	d.GetMaxMigDeviceCountFunc = get(g, "GetMaxMigDeviceCount", d.maxMigDeviceCount)
	d.GetMigDeviceHandleByIndexFunc = guard1(enabled, "GetMigDeviceHandleByIndex", d.migDeviceHandleByIndex)
	d.IsMigDeviceHandleFunc = get(g, "IsMigDeviceHandle", func() bool { return false })
	// A whole GPU's handle is not a MIG device handle.
	d.GetDeviceHandleFromMigDeviceHandleFunc = guard(capable, "GetDeviceHandleFromMigDeviceHandle", fails[nvml.Device](nvml.ERROR_INVALID_ARGUMENT))
	d.GetGpuInstanceIdFunc = guard(capable, "GetGpuInstanceId", fails[int](nvml.ERROR_INVALID_ARGUMENT))
	d.GetComputeInstanceIdFunc = guard(capable, "GetComputeInstanceId", fails[int](nvml.ERROR_INVALID_ARGUMENT))
	// nvml.h: "This API currently only supports MIG device handles."
	d.GetAttributesFunc = guard(g, "GetAttributes", fails[nvml.DeviceAttributes](nvml.ERROR_NOT_SUPPORTED))
	d.GetGpuInstanceProfileInfoFunc = guard1(capable, "GetGpuInstanceProfileInfo", d.gpuInstanceProfileInfo)
	d.GetGpuInstancePossiblePlacementsFunc = guard1(capable, "GetGpuInstancePossiblePlacements", d.gpuInstancePlacements)
	d.GetGpuInstanceRemainingCapacityFunc = guard1(enabled, "GetGpuInstanceRemainingCapacity", d.gpuInstanceRemainingCapacity)
	d.CreateGpuInstanceFunc = guard1(enabled, "CreateGpuInstance", d.createGpuInstance)
	d.CreateGpuInstanceWithPlacementFunc = guard2(enabled, "CreateGpuInstanceWithPlacement", d.createGpuInstanceWithPlacement)
	d.GetGpuInstancesFunc = guard1(enabled, "GetGpuInstances", d.gpuInstances)
	d.GetGpuInstanceByIdFunc = guard1(enabled, "GetGpuInstanceById", d.gpuInstanceByID)
}

// The methods below are the bodies of the MIG calls setMIGFuncs models; each runs behind its
// gate, with m.mu held.

// setMigMode returns (activation status, return) as go-nvml's SetMigMode does; a failed call
// leaves the activation status unset (SUCCESS).
func (d *Device) setMigMode(mode int) (nvml.Return, nvml.Return) {
	if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
		return nvml.SUCCESS, nvml.ERROR_INVALID_ARGUMENT
	}
	if mode != d.migMode && len(d.gis) > 0 {
		return nvml.SUCCESS, nvml.ERROR_IN_USE
	}
	d.migMode = mode
	d.changed()
	return nvml.SUCCESS, nvml.SUCCESS
}

// maxMigDeviceCount follows nvml.h: "Returns zero if MIG is not supported or enabled."
func (d *Device) maxMigDeviceCount() int {
	if d.migCheck(true) != nvml.SUCCESS || d.geometry == nil {
		return 0
	}
	return d.geometry.ComputeSlices
}

func (d *Device) migDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if d.geometry == nil || i < 0 || i >= d.geometry.ComputeSlices {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	devs := d.migDevicesLocked()
	if i >= len(devs) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return devs[i], nvml.SUCCESS
}

func (d *Device) gpuInstanceProfileInfo(enum int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	if enum < 0 || enum >= nvml.GPU_INSTANCE_PROFILE_COUNT {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	if d.geometry == nil {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	p, ok := d.geometry.ProfileByEnum(enum)
	if !ok {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return giProfileInfo(p), nvml.SUCCESS
}

func (d *Device) gpuInstancePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	p, ret := d.giProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	out := make([]nvml.GpuInstancePlacement, len(p.Placements))
	for i, pl := range p.Placements {
		out[i] = nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)}
	}
	return out, nvml.SUCCESS
}

func (d *Device) gpuInstanceRemainingCapacity(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
	p, ret := d.giProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return d.remainingGIs(p), nvml.SUCCESS
}

func (d *Device) createGpuInstance(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
	p, ret := d.giProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return asGpuInstance(d.createGI(p, nil))
}

func (d *Device) createGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	p, ret := d.giProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	if pl == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return asGpuInstance(d.createGI(p, &mig.Placement{Start: int(pl.Start), Size: int(pl.Size)}))
}

// asGpuInstance returns a created GPU instance as NVML does: a nil interface when it failed.
func asGpuInstance(gi *GpuInstance, ret nvml.Return) (nvml.GpuInstance, nvml.Return) {
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return gi, nvml.SUCCESS
}

func (d *Device) gpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	p, ret := d.giProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	var out []nvml.GpuInstance
	for _, gi := range d.sortedGIs() {
		if gi.profile.ID == p.ID {
			out = append(out, gi)
		}
	}
	return out, nvml.SUCCESS
}

func (d *Device) gpuInstanceByID(id int) (nvml.GpuInstance, nvml.Return) {
	if id < 0 {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	gi, ok := d.gis[uint32(id)]
	if !ok {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return gi, nvml.SUCCESS
}

// enter counts a call on the GPU instance and checks that it still exists.
func (gi *GpuInstance) enter(method string) nvml.Return {
	d := gi.d
	if ret := d.m.enter("GpuInstance", method); ret != nvml.SUCCESS {
		return ret
	}
	d.sync()
	switch {
	case d.lost:
		return nvml.ERROR_GPU_IS_LOST
	case gi.destroyed:
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.SUCCESS
}

func (gi *GpuInstance) info() nvml.GpuInstanceInfo {
	return nvml.GpuInstanceInfo{
		Device:    gi.d,
		Id:        gi.id,
		ProfileId: uint32(gi.profile.ID),
		Placement: nvml.GpuInstancePlacement{Start: uint32(gi.placement.Start), Size: uint32(gi.placement.Size)},
	}
}

func (gi *GpuInstance) setFuncs() {
	g := gate{mu: &gi.d.m.mu, enter: gi.enter}
	gi.GetInfoFunc = get(g, "GetInfo", gi.info)
	gi.GetComputeInstanceProfileInfoFunc = guard2(g, "GetComputeInstanceProfileInfo", gi.computeInstanceProfileInfo)
	gi.GetComputeInstancePossiblePlacementsFunc = guard1(g, "GetComputeInstancePossiblePlacements", gi.computeInstancePlacements)
	gi.GetComputeInstanceRemainingCapacityFunc = guard1(g, "GetComputeInstanceRemainingCapacity", gi.computeInstanceRemainingCapacity)
	gi.CreateComputeInstanceFunc = guard1(g, "CreateComputeInstance", gi.createComputeInstance)
	gi.CreateComputeInstanceWithPlacementFunc = guard2(g, "CreateComputeInstanceWithPlacement", gi.createComputeInstanceWithPlacement)
	gi.GetComputeInstancesFunc = guard1(g, "GetComputeInstances", gi.computeInstances)
	gi.GetComputeInstanceByIdFunc = guard1(g, "GetComputeInstanceById", gi.computeInstanceByID)
	gi.DestroyFunc = guardRet(g, "Destroy", gi.destroy)
	fillDefaults(gi.d.m, &gi.GpuInstance, "GpuInstance", func() bool { return gi.d.lost })
}

// The methods below are the bodies of the calls GpuInstance.setFuncs models; each runs behind
// the GPU instance's gate, with m.mu held.

func (gi *GpuInstance) computeInstanceProfileInfo(enum, engine int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	if enum < 0 || enum >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT || engine < 0 || engine >= nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	for i := range gi.profile.ComputeProfiles {
		if c := &gi.profile.ComputeProfiles[i]; c.Enum == enum {
			return ciProfileInfo(gi.profile, c), nvml.SUCCESS
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
}

func (gi *GpuInstance) computeInstancePlacements(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstancePlacement, nvml.Return) {
	c, ret := gi.ciProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	starts := ciStarts(gi.profile, c)
	out := make([]nvml.ComputeInstancePlacement, len(starts))
	for i, s := range starts {
		out[i] = nvml.ComputeInstancePlacement{Start: uint32(s), Size: uint32(c.Slices)}
	}
	return out, nvml.SUCCESS
}

func (gi *GpuInstance) computeInstanceRemainingCapacity(info *nvml.ComputeInstanceProfileInfo) (int, nvml.Return) {
	c, ret := gi.ciProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return gi.remainingCIs(c), nvml.SUCCESS
}

func (gi *GpuInstance) createComputeInstance(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	c, ret := gi.ciProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return asComputeInstance(gi.createCI(c, nil))
}

func (gi *GpuInstance) createComputeInstanceWithPlacement(info *nvml.ComputeInstanceProfileInfo, pl *nvml.ComputeInstancePlacement) (nvml.ComputeInstance, nvml.Return) {
	c, ret := gi.ciProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	if pl == nil || int(pl.Size) != c.Slices {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	start := int(pl.Start)
	return asComputeInstance(gi.createCI(c, &start))
}

// asComputeInstance returns a created compute instance as NVML does: a nil interface when it
// failed.
func asComputeInstance(ci *ComputeInstance, ret nvml.Return) (nvml.ComputeInstance, nvml.Return) {
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return ci, nvml.SUCCESS
}

func (gi *GpuInstance) computeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	c, ret := gi.ciProfileByInfo(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	var out []nvml.ComputeInstance
	for _, id := range sortedKeys(gi.cis) {
		if ci := gi.cis[id]; ci.profile.ID == c.ID {
			out = append(out, ci)
		}
	}
	return out, nvml.SUCCESS
}

func (gi *GpuInstance) computeInstanceByID(id int) (nvml.ComputeInstance, nvml.Return) {
	if id < 0 {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	ci, ok := gi.cis[uint32(id)]
	if !ok {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return ci, nvml.SUCCESS
}

func (gi *GpuInstance) destroy() nvml.Return {
	if len(gi.cis) > 0 {
		return nvml.ERROR_IN_USE
	}
	gi.destroyed = true
	delete(gi.d.gis, gi.id)
	gi.d.changed()
	return nvml.SUCCESS
}

// enter counts a call on the compute instance and checks that it still exists.
func (ci *ComputeInstance) enter(method string) nvml.Return {
	d := ci.gi.d
	if ret := d.m.enter("ComputeInstance", method); ret != nvml.SUCCESS {
		return ret
	}
	d.sync()
	switch {
	case d.lost:
		return nvml.ERROR_GPU_IS_LOST
	case ci.destroyed:
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.SUCCESS
}

func (ci *ComputeInstance) setFuncs() {
	g := gate{mu: &ci.gi.d.m.mu, enter: ci.enter}
	ci.GetInfoFunc = get(g, "GetInfo", ci.info)
	ci.DestroyFunc = guardRet(g, "Destroy", ci.destroy)
	fillDefaults(ci.gi.d.m, &ci.ComputeInstance, "ComputeInstance", func() bool { return ci.gi.d.lost })
}

func (ci *ComputeInstance) info() nvml.ComputeInstanceInfo {
	return nvml.ComputeInstanceInfo{
		Device:      ci.gi.d,
		GpuInstance: ci.gi,
		Id:          ci.id,
		ProfileId:   uint32(ci.profile.ID),
		Placement:   nvml.ComputeInstancePlacement{Start: uint32(ci.start), Size: uint32(ci.profile.Slices)},
	}
}

// destroy runs behind the compute instance's gate, with m.mu held.
func (ci *ComputeInstance) destroy() nvml.Return {
	ci.destroyed = true
	delete(ci.gi.cis, ci.id)
	ci.gi.d.changed()
	return nvml.SUCCESS
}

// enter counts a call on the MIG device handle and checks that its compute instance still exists.
func (md *MIGDeviceHandle) enter(method string) nvml.Return {
	d := md.ci.gi.d
	if ret := d.m.enter("MIGDeviceHandle", method); ret != nvml.SUCCESS {
		return ret
	}
	d.sync()
	switch {
	case d.lost:
		return nvml.ERROR_GPU_IS_LOST
	case md.ci.destroyed:
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.SUCCESS
}

// profileName is the MIG device's profile name: "3g.20gb", or "1c.3g.20gb" for a compute
// instance smaller than its GPU instance.
func (md *MIGDeviceHandle) profileName() string {
	gp := md.ci.gi.profile
	if md.ci.profile.Slices == gp.ComputeSlices {
		return gp.Name
	}
	return strconv.Itoa(md.ci.profile.Slices) + "c." + gp.Name
}

func (md *MIGDeviceHandle) setFuncs() {
	ci := md.ci
	gi := ci.gi
	d := gi.d
	g := gate{mu: &d.m.mu, enter: md.enter}
	md.IsMigDeviceHandleFunc = get(g, "IsMigDeviceHandle", func() bool { return true })
	md.GetDeviceHandleFromMigDeviceHandleFunc = get(g, "GetDeviceHandleFromMigDeviceHandle", func() nvml.Device { return d })
	md.GetGpuInstanceIdFunc = get(g, "GetGpuInstanceId", func() int { return int(gi.id) })
	md.GetComputeInstanceIdFunc = get(g, "GetComputeInstanceId", func() int { return int(ci.id) })
	md.GetUUIDFunc = get(g, "GetUUID", func() string { return md.uuid })
	md.GetNameFunc = get(g, "GetName", func() string { return d.model.productName + " MIG " + md.profileName() })
	md.GetIndexFunc = get(g, "GetIndex", func() int { return slices.Index(d.migDevicesLocked(), md) })
	md.GetAttributesFunc = get(g, "GetAttributes", md.attributes)
	md.GetMemoryInfoFunc = get(g, "GetMemoryInfo", func() nvml.Memory { return memoryInfo(gi.profile.MemoryMiB) })
	md.GetMemoryInfo_v2Func = get(g, "GetMemoryInfo_v2", func() nvml.Memory_v2 { return memoryInfoV2(gi.profile.MemoryMiB) })
	md.GetPciInfoFunc = get(g, "GetPciInfo", d.pciInfo)
	md.GetArchitectureFunc = get(g, "GetArchitecture", func() nvml.DeviceArchitecture { return d.model.arch })
	md.GetBrandFunc = get(g, "GetBrand", func() nvml.BrandType { return d.model.brand })
	md.GetCudaComputeCapabilityFunc = guardPair(g, "GetCudaComputeCapability", d.computeCapability)
	md.GetComputeModeFunc = get(g, "GetComputeMode", func() nvml.ComputeMode { return md.computeMode })
	md.SetComputeModeFunc = guardRet1(g, "SetComputeMode", md.setComputeMode)
	md.GetMaxMigDeviceCountFunc = guard(g, "GetMaxMigDeviceCount", fails[int](nvml.ERROR_INVALID_ARGUMENT))
	fillDefaults(d.m, &md.Device, "MIGDeviceHandle", func() bool { return d.lost })
}

// attributes runs behind the MIG device handle's gate, with m.mu held.
func (md *MIGDeviceHandle) attributes() nvml.DeviceAttributes {
	ci := md.ci
	p := ci.gi.profile
	return nvml.DeviceAttributes{
		MultiprocessorCount:       uint32(ci.profile.Multiprocessors),
		SharedCopyEngineCount:     uint32(p.CopyEngines),
		SharedDecoderCount:        uint32(p.Decoders),
		SharedEncoderCount:        uint32(p.Encoders),
		SharedJpegCount:           uint32(p.JpegEngines),
		SharedOfaCount:            uint32(p.OfaEngines),
		GpuInstanceSliceCount:     uint32(p.ComputeSlices),
		ComputeInstanceSliceCount: uint32(ci.profile.Slices),
		MemorySizeMB:              p.MemoryMiB,
	}
}

// setComputeMode runs behind the MIG device handle's gate, with m.mu held.
func (md *MIGDeviceHandle) setComputeMode(mode nvml.ComputeMode) nvml.Return {
	if ret := validComputeMode(mode); ret != nvml.SUCCESS {
		return ret
	}
	md.computeMode = mode
	md.ci.gi.d.changed()
	return nvml.SUCCESS
}
