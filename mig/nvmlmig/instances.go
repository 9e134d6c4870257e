package nvmlmig

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/mig"
)

// GPUInstanceState is one GPU instance that exists on a GPU, as NVML reports it.
type GPUInstanceState struct {
	// ID is NVML's GPU instance id.
	ID int
	// Profile is NVML's info of the instance's GPU-instance profile (Id, slice count, memory,
	// engine counts).
	Profile nvml.GpuInstanceProfileInfo
	// ProfileEnum is the GPU_INSTANCE_PROFILE_* value the instance was found under.
	ProfileEnum int
	// Placement is where the instance sits, in memory slices.
	Placement mig.Placement
	// Handle is NVML's handle of the instance, valid until it is destroyed.
	Handle nvml.GpuInstance
	// ComputeInstances are the instance's compute instances (MIG devices), by id. A GPU
	// instance without any is listed too: it still holds its slices.
	ComputeInstances []ComputeInstanceState
}

// ComputeInstanceState is one compute instance inside a GPU instance: a MIG device.
type ComputeInstanceState struct {
	// ID is NVML's compute instance id within its GPU instance.
	ID int
	// Profile is NVML's info of the compute-instance profile (Id, slice count, SM count).
	Profile nvml.ComputeInstanceProfileInfo
	// UUID is the MIG device's UUID ("MIG-..."); empty when NVML has no MIG device handles to
	// read it from (GetMaxMigDeviceCount not supported, see ListInstances).
	UUID string
	// Handle is NVML's handle of the compute instance, valid until it is destroyed.
	Handle nvml.ComputeInstance
}

// WalkError is an NVML failure while ListInstances walks a GPU's instances.
type WalkError struct {
	// MIGIndex is the index of the MIG device handle being read, -1 when the failure is not
	// about one.
	MIGIndex int
	// Op is the NVML method that failed ("GetUUID", "GetGpuInstanceById", ...).
	Op string
	// Return is NVML's error.
	Return nvml.Return
	// Detail says more where the Return alone does not (an Id NVML does not list).
	Detail string
}

// Error implements error.
func (e *WalkError) Error() string {
	s := e.Op
	if e.MIGIndex >= 0 {
		s = fmt.Sprintf("MIG device %d: %s", e.MIGIndex, e.Op)
	}
	if e.Detail != "" {
		return s + ": " + e.Detail
	}
	return fmt.Sprintf("%s: %v", s, e.Return)
}

// Unwrap returns the NVML error, so errors.Is(err, nvml.ERROR_...) works.
func (e *WalkError) Unwrap() error {
	if e.Return == nvml.SUCCESS {
		return nil
	}
	return e.Return
}

// ListInstances walks the GPU instances and compute instances that exist on dev. It is the one
// place that reads MIG state through NVML: enumeration, the InstanceManager and kubelet plugins all use
// it. A GPU without MIG support, or with MIG mode off, has none. Instances are sorted by
// placement, compute instances by id. Failures are *WalkError; callers add which GPU it was.
//
// MIG devices are found through their handles (GetMaxMigDeviceCount, GetMigDeviceHandleByIndex),
// which carry their UUIDs. Where NVML does not support those (ERROR_NOT_SUPPORTED or
// ERROR_FUNCTION_NOT_FOUND from GetMaxMigDeviceCount), the compute instances are listed through
// their GPU instances instead, with empty UUIDs: enough to destroy them and to turn MIG off,
// not to hand one out.
func ListInstances(dev nvml.Device) ([]GPUInstanceState, error) {
	if dev == nil {
		return nil, errNilDevice("ListInstances")
	}
	mode, _, ret := dev.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && mode != nvml.DEVICE_MIG_ENABLE) {
		return nil, nil
	}
	if ret != nvml.SUCCESS {
		return nil, &WalkError{MIGIndex: -1, Op: "GetMigMode", Return: ret}
	}
	return walk(dev)
}

// ListEnabledInstances is ListInstances for a caller that has just read dev's MIG mode as
// enabled (enumeration does): it does not read the mode again, so a GPU whose answers change
// between two calls (GetMigMode answering NOT_SUPPORTED the second time) is not taken for one
// with MIG off and no instances; any failure of the walk is a *WalkError.
func ListEnabledInstances(dev nvml.Device) ([]GPUInstanceState, error) {
	if dev == nil {
		return nil, errNilDevice("ListEnabledInstances")
	}
	return walk(dev)
}

// walk lists the instances of a GPU in MIG mode.
func walk(dev nvml.Device) ([]GPUInstanceState, error) {
	w := &walker{dev: dev, byID: map[int]*GPUInstanceState{}}
	if err := w.migDevices(); err != nil {
		return nil, err
	}
	if err := w.gpuInstances(); err != nil {
		return nil, err
	}
	if w.noHandles {
		if err := w.computeInstances(); err != nil {
			return nil, err
		}
	}
	out := make([]GPUInstanceState, 0, len(w.byID))
	for _, gi := range w.byID {
		slices.SortFunc(gi.ComputeInstances, func(a, b ComputeInstanceState) int { return cmp.Compare(a.ID, b.ID) })
		out = append(out, *gi)
	}
	slices.SortFunc(out, func(a, b GPUInstanceState) int {
		return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// walker collects the instances of one GPU.
type walker struct {
	dev  nvml.Device
	byID map[int]*GPUInstanceState
	// giProfiles maps GPU-instance profile Ids to their info and enum, filled on first use.
	giProfiles map[uint32]giProfileInfo
	// ciProfiles caches compute-instance profile infos by GPU-instance and compute-instance
	// profile Id.
	ciProfiles map[[2]uint32]nvml.ComputeInstanceProfileInfo
	// noHandles says NVML lists no MIG device handles: compute instances are read through
	// their GPU instances.
	noHandles bool
}

type giProfileInfo struct {
	info nvml.GpuInstanceProfileInfo
	enum int
}

// migDevices finds every compute instance through the MIG device handles, which also carry
// the MIG device UUIDs.
func (w *walker) migDevices() error {
	maxDev, ret := w.dev.GetMaxMigDeviceCount()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		w.noHandles = true
		return nil
	default:
		return &WalkError{MIGIndex: -1, Op: "GetMaxMigDeviceCount", Return: ret}
	}
	for i := range maxDev {
		md, ret := w.dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return &WalkError{MIGIndex: i, Op: "GetMigDeviceHandleByIndex", Return: ret}
		}
		if err := w.migDevice(i, md); err != nil {
			return err
		}
	}
	return nil
}

func (w *walker) migDevice(i int, md nvml.Device) error {
	fail := func(op string, ret nvml.Return) error { return &WalkError{MIGIndex: i, Op: op, Return: ret} }
	uuid, ret := md.GetUUID()
	if ret != nvml.SUCCESS {
		return fail("GetUUID", ret)
	}
	giID, ret := md.GetGpuInstanceId()
	if ret != nvml.SUCCESS {
		return fail("GetGpuInstanceId", ret)
	}
	ciID, ret := md.GetComputeInstanceId()
	if ret != nvml.SUCCESS {
		return fail("GetComputeInstanceId", ret)
	}
	gi, ret := w.dev.GetGpuInstanceById(giID)
	if ret != nvml.SUCCESS {
		return fail("GetGpuInstanceById", ret)
	}
	state, err := w.add(gi, i)
	if err != nil {
		return err
	}
	ci, ret := gi.GetComputeInstanceById(ciID)
	if ret != nvml.SUCCESS {
		return fail("GetComputeInstanceById", ret)
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return fail("ComputeInstance.GetInfo", ret)
	}
	prof, err := w.ciProfile(gi, state.Profile.Id, ciInfo.ProfileId, i)
	if err != nil {
		return err
	}
	state.ComputeInstances = append(state.ComputeInstances, ComputeInstanceState{ID: ciID, Profile: prof, UUID: uuid, Handle: ci})
	return nil
}

// gpuInstances adds the GPU instances that have no compute instance, which no MIG device
// handle reaches.
func (w *walker) gpuInstances() error {
	if err := w.loadGIProfiles(); err != nil {
		return err
	}
	ids := make([]uint32, 0, len(w.giProfiles))
	for id := range w.giProfiles {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := w.giProfiles[id]
		info := p.info
		gis, ret := w.dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return &WalkError{MIGIndex: -1, Op: "GetGpuInstances", Return: ret}
		}
		for _, gi := range gis {
			if _, err := w.add(gi, -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// computeInstances adds the compute instances of every GPU instance, found through the GPU
// instance rather than a MIG device handle, without UUIDs.
func (w *walker) computeInstances() error {
	for _, gi := range w.byID {
		for enum := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
			info, ret := gi.Handle.GetComputeInstanceProfileInfo(enum, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			switch ret {
			case nvml.SUCCESS:
			case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
				continue
			default:
				return &WalkError{MIGIndex: -1, Op: "GetComputeInstanceProfileInfo", Return: ret}
			}
			cis, ret := gi.Handle.GetComputeInstances(&info)
			if ret != nvml.SUCCESS {
				return &WalkError{MIGIndex: -1, Op: "GetComputeInstances", Return: ret}
			}
			for _, ci := range cis {
				ciInfo, ret := ci.GetInfo()
				if ret != nvml.SUCCESS {
					return &WalkError{MIGIndex: -1, Op: "ComputeInstance.GetInfo", Return: ret}
				}
				gi.ComputeInstances = append(gi.ComputeInstances, ComputeInstanceState{ID: int(ciInfo.Id), Profile: info, Handle: ci})
			}
		}
	}
	return nil
}

// add records a GPU instance once and returns its state; migIndex is the MIG device handle it
// was reached from (-1: none), for errors.
func (w *walker) add(gi nvml.GpuInstance, migIndex int) (*GPUInstanceState, error) {
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return nil, &WalkError{MIGIndex: migIndex, Op: "GpuInstance.GetInfo", Return: ret}
	}
	if s, ok := w.byID[int(info.Id)]; ok {
		return s, nil
	}
	if err := w.loadGIProfiles(); err != nil {
		return nil, err
	}
	p, ok := w.giProfiles[info.ProfileId]
	if !ok {
		return nil, &WalkError{MIGIndex: migIndex, Op: "GetGpuInstanceProfileInfo", Return: nvml.ERROR_NOT_FOUND,
			Detail: fmt.Sprintf("GPU instance %d has profile Id %d, which NVML does not list", info.Id, info.ProfileId)}
	}
	s := &GPUInstanceState{ID: int(info.Id), Profile: p.info, ProfileEnum: p.enum, Handle: gi,
		Placement: mig.Placement{Start: int(info.Placement.Start), Size: int(info.Placement.Size)}}
	w.byID[s.ID] = s
	return s, nil
}

// loadGIProfiles asks NVML for every GPU-instance profile enum the GPU supports.
func (w *walker) loadGIProfiles() error {
	if w.giProfiles != nil {
		return nil
	}
	w.giProfiles = map[uint32]giProfileInfo{}
	for enum := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := w.dev.GetGpuInstanceProfileInfo(enum)
		switch ret {
		case nvml.SUCCESS:
			w.giProfiles[info.Id] = giProfileInfo{info: info, enum: enum}
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
		default:
			return &WalkError{MIGIndex: -1, Op: "GetGpuInstanceProfileInfo", Return: ret}
		}
	}
	return nil
}

// ciProfile finds NVML's info of the compute-instance profile Id inside gi, whose GPU-instance
// profile Id is giProfile; migIndex names the MIG device handle in errors.
func (w *walker) ciProfile(gi nvml.GpuInstance, giProfile, id uint32, migIndex int) (nvml.ComputeInstanceProfileInfo, error) {
	key := [2]uint32{giProfile, id}
	if info, ok := w.ciProfiles[key]; ok {
		return info, nil
	}
	if w.ciProfiles == nil {
		w.ciProfiles = map[[2]uint32]nvml.ComputeInstanceProfileInfo{}
	}
	for enum := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(enum, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		switch ret {
		case nvml.SUCCESS:
			w.ciProfiles[[2]uint32{giProfile, info.Id}] = info
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
		default:
			return nvml.ComputeInstanceProfileInfo{}, &WalkError{MIGIndex: migIndex, Op: "GetComputeInstanceProfileInfo", Return: ret}
		}
	}
	if info, ok := w.ciProfiles[key]; ok {
		return info, nil
	}
	return nvml.ComputeInstanceProfileInfo{}, &WalkError{MIGIndex: migIndex, Op: "GetComputeInstanceProfileInfo", Return: nvml.ERROR_NOT_FOUND,
		Detail: fmt.Sprintf("compute instance profile Id %d is not listed by NVML", id)}
}
