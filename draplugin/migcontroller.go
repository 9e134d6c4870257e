package draplugin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// NewNVMLMIGController returns a MIGController that drives NVML through nvmlmig.InstanceManager.
// lookup maps product names to MIG geometry (nil: mig.Lookup). Device handles and managers are
// cached per GPU.
func NewNVMLMIGController(lib nvml.Interface, lookup func(productName string) (*mig.Model, error)) MIGController {
	if lookup == nil {
		lookup = mig.Lookup
	}
	return &nvmlMIG{lib: lib, lookup: lookup, managers: map[string]*nvmlmig.InstanceManager{}}
}

type nvmlMIG struct {
	lib      nvml.Interface
	lookup   func(string) (*mig.Model, error)
	mu       sync.Mutex
	managers map[string]*nvmlmig.InstanceManager // by GPU UUID
}

var _ MIGController = (*nvmlMIG)(nil)

func (n *nvmlMIG) manager(uuid string) (*nvmlmig.InstanceManager, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m, ok := n.managers[uuid]; ok {
		return m, nil
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
	m, err := nvmlmig.NewInstanceManager(dev, model)
	if err != nil {
		return nil, err
	}
	n.managers[uuid] = m
	return m, nil
}

// Instances implements MIGController.
func (n *nvmlMIG) Instances(_ context.Context, gpuUUID string) ([]MIGInstance, error) {
	m, err := n.manager(gpuUUID)
	if err != nil {
		return nil, err
	}
	states, err := m.Instances()
	if err != nil {
		return nil, err
	}
	out := make([]MIGInstance, 0, len(states))
	for _, st := range states {
		in := MIGInstance{GIProfileID: int(st.Profile.Id), GIID: st.ID, CIID: -1, Placement: st.Placement}
		if p, ok := m.Model().ProfileByID(in.GIProfileID); ok {
			in.Profile = p.Name
		}
		if len(st.ComputeInstances) > 0 {
			in.CIID, in.UUID = st.ComputeInstances[0].ID, st.ComputeInstances[0].UUID
		}
		out = append(out, in)
	}
	return out, nil
}

// Create implements MIGController.
func (n *nvmlMIG) Create(ctx context.Context, gpuUUID, profile string, placement mig.Placement) (MIGInstance, error) {
	m, err := n.manager(gpuUUID)
	if err != nil {
		return MIGInstance{}, err
	}
	pl := placement
	created, err := m.Apply([]mig.Instance{{Profile: profile, Placement: &pl}})
	if err != nil {
		return MIGInstance{}, err
	}
	if len(created) != 1 {
		return MIGInstance{}, fmt.Errorf("create %s at %d on GPU %s: got %d instances", profile, placement.Start, gpuUUID, len(created))
	}
	c := created[0]
	insts, err := n.Instances(ctx, gpuUUID)
	if err != nil {
		return MIGInstance{}, fmt.Errorf("read back %s at %d on GPU %s: %w", profile, placement.Start, gpuUUID, err)
	}
	for _, in := range insts {
		if in.GIID != c.GPUInstanceID {
			continue
		}
		if in.UUID == "" {
			// NVML lists no MIG device handles (GetMaxMigDeviceCount not supported): a device
			// without a UUID cannot be handed to a container.
			err := fmt.Errorf("created %s at %d on GPU %s, but NVML reports no MIG device UUID for it (GetMaxMigDeviceCount: %w)", profile, placement.Start, gpuUUID, nvml.ERROR_NOT_SUPPORTED)
			return MIGInstance{}, errors.Join(err, m.Remove([]mig.Instance{{Profile: profile, Placement: &pl}}))
		}
		in.CIID = c.ComputeInstanceID
		return in, nil
	}
	return MIGInstance{}, fmt.Errorf("created %s at %d on GPU %s (GPU instance %d) but cannot find it", profile, placement.Start, gpuUUID, c.GPUInstanceID)
}

// Destroy implements MIGController.
func (n *nvmlMIG) Destroy(_ context.Context, gpuUUID, profile string, placement mig.Placement) error {
	m, err := n.manager(gpuUUID)
	if err != nil {
		return err
	}
	pl := placement
	return m.Remove([]mig.Instance{{Profile: profile, Placement: &pl}})
}

// DisableMIG implements MIGController.
func (n *nvmlMIG) DisableMIG(_ context.Context, gpuUUID string) (bool, error) {
	m, err := n.manager(gpuUUID)
	if err != nil {
		return false, err
	}
	changed, reset, err := m.DisableMIG()
	if err != nil {
		return false, err
	}
	if reset {
		return false, fmt.Errorf("MIG mode on GPU %s is off only after a GPU reset (nvidia-smi -r): the whole GPU cannot be used until then", gpuUUID)
	}
	return changed, nil
}

// republishingMIG is the plugin's MIGController with a hook: every change that succeeded makes
// the plugin publish its slices again (a DisableMIG that found MIG mode off changed nothing), so that dynamic MIG partitions follow the instances that
// exist (prepare, rollback, unprepare and reconciliation all change them through here).
type republishingMIG struct {
	MIGController
	changed func()
}

var _ MIGController = (*republishingMIG)(nil)

// Create implements MIGController.
func (r *republishingMIG) Create(ctx context.Context, gpuUUID, profile string, placement mig.Placement) (MIGInstance, error) {
	in, err := r.MIGController.Create(ctx, gpuUUID, profile, placement)
	if err == nil {
		r.changed()
	}
	return in, err
}

// Destroy implements MIGController.
func (r *republishingMIG) Destroy(ctx context.Context, gpuUUID, profile string, placement mig.Placement) error {
	err := r.MIGController.Destroy(ctx, gpuUUID, profile, placement)
	if err == nil {
		r.changed()
	}
	return err
}

// DisableMIG implements MIGController.
func (r *republishingMIG) DisableMIG(ctx context.Context, gpuUUID string) (bool, error) {
	changed, err := r.MIGController.DisableMIG(ctx, gpuUUID)
	if changed {
		r.changed()
	}
	return changed, err
}
