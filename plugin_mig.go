package gpudra

import (
	"context"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/mig"
)

// MIGInstanceState is one GPU instance on a GPU, with its (first) compute instance when it has
// one.
type MIGInstanceState struct {
	// GIProfileID is the NVML GPU-instance profile Id (not the enum).
	GIProfileID int
	// Profile is the canonical GPU-instance profile name ("1g.5gb").
	Profile string
	// Placement is where the GPU instance sits, in memory slices.
	Placement mig.Placement
	// GIID is the GPU instance id.
	GIID int
	// CIID is the id of its compute instance, -1 when it has none.
	CIID int
	// UUID is the MIG device UUID of that compute instance, empty when it has none.
	UUID string
}

// MIGController creates and destroys the MIG instances of dynamic MIG devices on a GPU named
// by UUID. The plugin calls it for one GPU at a time (under that GPU's lock).
// NewNVMLMIGController is the implementation over NVML and the mig package's Manager.
type MIGController interface {
	// Instances lists the GPU instances that exist on the GPU now.
	Instances(ctx context.Context, gpuUUID string) ([]MIGInstanceState, error)
	// Create creates a GPU instance of the profile at exactly that placement, with a compute
	// instance spanning it, enabling MIG mode if needed. On failure nothing is left behind.
	Create(ctx context.Context, gpuUUID, profile string, placement mig.Placement) (MIGInstanceState, error)
	// Destroy destroys the GPU instance of the profile at that placement and its compute
	// instances. An instance that does not exist is not an error.
	Destroy(ctx context.Context, gpuUUID, profile string, placement mig.Placement) error
}

// NewNVMLMIGController returns a MIGController that drives NVML through mig.Manager.
// lookup maps product names to MIG geometry (nil: mig.Lookup). Device handles and managers are
// cached per GPU.
func NewNVMLMIGController(lib nvml.Interface, lookup func(productName string) (*mig.Model, error)) MIGController {
	if lookup == nil {
		lookup = mig.Lookup
	}
	return &nvmlMIG{lib: lib, lookup: lookup, gpus: map[string]*nvmlMIGGPU{}}
}

type nvmlMIG struct {
	lib    nvml.Interface
	lookup func(string) (*mig.Model, error)
	mu     sync.Mutex
	gpus   map[string]*nvmlMIGGPU
}

type nvmlMIGGPU struct {
	dev   nvml.Device
	model *mig.Model
	mgr   *mig.Manager
}

func (n *nvmlMIG) gpu(uuid string) (*nvmlMIGGPU, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if g, ok := n.gpus[uuid]; ok {
		return g, nil
	}
	dev, ret := n.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get handle of GPU %s: %w", uuid, ret)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get name of GPU %s: %w", uuid, ret)
	}
	model, err := n.lookup(name)
	if err != nil {
		return nil, fmt.Errorf("GPU %s: %w", uuid, err)
	}
	mgr, err := mig.NewManager(dev, model)
	if err != nil {
		return nil, err
	}
	g := &nvmlMIGGPU{dev: dev, model: model, mgr: mgr}
	n.gpus[uuid] = g
	return g, nil
}

// Instances implements MIGController.
func (n *nvmlMIG) Instances(_ context.Context, gpuUUID string) ([]MIGInstanceState, error) {
	g, err := n.gpu(gpuUUID)
	if err != nil {
		return nil, err
	}
	mode, _, ret := g.dev.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && mode != nvml.DEVICE_MIG_ENABLE) {
		return nil, nil
	}
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get MIG mode of GPU %s: %w", gpuUUID, ret)
	}
	// MIG devices (compute instances) by GPU instance id.
	type ciRef struct {
		ci   int
		uuid string
	}
	cis := map[int]ciRef{}
	maxDev, ret := g.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get MIG device count of GPU %s: %w", gpuUUID, ret)
	}
	for i := 0; i < maxDev; i++ {
		md, ret := g.dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get MIG device %d of GPU %s: %w", i, gpuUUID, ret)
		}
		giID, ret := md.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get GPU instance id of MIG device %d of GPU %s: %w", i, gpuUUID, ret)
		}
		ciID, ret := md.GetComputeInstanceId()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get compute instance id of MIG device %d of GPU %s: %w", i, gpuUUID, ret)
		}
		u, ret := md.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get UUID of MIG device %d of GPU %s: %w", i, gpuUUID, ret)
		}
		if prev, ok := cis[giID]; !ok || ciID < prev.ci {
			cis[giID] = ciRef{ci: ciID, uuid: u}
		}
	}
	var out []MIGInstanceState
	for i := range g.model.Profiles {
		prof := &g.model.Profiles[i]
		info, ret := g.dev.GetGpuInstanceProfileInfo(prof.Enum)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get profile info of %s on GPU %s: %w", prof.Name, gpuUUID, ret)
		}
		gis, ret := g.dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("list %s GPU instances on GPU %s: %w", prof.Name, gpuUUID, ret)
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("get info of a %s GPU instance on GPU %s: %w", prof.Name, gpuUUID, ret)
			}
			st := MIGInstanceState{GIProfileID: prof.ID, Profile: prof.Name, GIID: int(gii.Id), CIID: -1,
				Placement: mig.Placement{Start: int(gii.Placement.Start), Size: int(gii.Placement.Size)}}
			if c, ok := cis[st.GIID]; ok {
				st.CIID, st.UUID = c.ci, c.uuid
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// Create implements MIGController.
func (n *nvmlMIG) Create(ctx context.Context, gpuUUID, profile string, placement mig.Placement) (MIGInstanceState, error) {
	g, err := n.gpu(gpuUUID)
	if err != nil {
		return MIGInstanceState{}, err
	}
	pl := placement
	created, err := g.mgr.Apply([]mig.Instance{{Profile: profile, Placement: &pl}})
	if err != nil {
		return MIGInstanceState{}, err
	}
	if len(created) != 1 {
		return MIGInstanceState{}, fmt.Errorf("create %s at %d on GPU %s: got %d instances", profile, placement.Start, gpuUUID, len(created))
	}
	c := created[0]
	insts, err := n.Instances(ctx, gpuUUID)
	if err != nil {
		return MIGInstanceState{}, fmt.Errorf("read back %s at %d on GPU %s: %w", profile, placement.Start, gpuUUID, err)
	}
	for _, in := range insts {
		if in.GIID == c.GPUInstanceID {
			in.CIID = c.ComputeInstanceID
			return in, nil
		}
	}
	return MIGInstanceState{}, fmt.Errorf("created %s at %d on GPU %s (GPU instance %d) but cannot find it", profile, placement.Start, gpuUUID, c.GPUInstanceID)
}

// Destroy implements MIGController.
func (n *nvmlMIG) Destroy(_ context.Context, gpuUUID, profile string, placement mig.Placement) error {
	g, err := n.gpu(gpuUUID)
	if err != nil {
		return err
	}
	if mode, _, ret := g.dev.GetMigMode(); ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && mode != nvml.DEVICE_MIG_ENABLE) {
		return nil // no MIG mode, no instance
	}
	pl := placement
	return g.mgr.Remove([]mig.Instance{{Profile: profile, Placement: &pl}})
}
