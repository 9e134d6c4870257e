package nvmlmig

import (
	"errors"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/mig"
)

// InstanceManager creates and destroys MIG instances on one GPU through NVML. It is not safe for
// concurrent use on the same GPU; use one InstanceManager per GPU and serialise calls.
type InstanceManager struct {
	dev   nvml.Device
	model *mig.Model
	label string
}

// NewInstanceManager returns an InstanceManager for dev. m is the GPU's model; when nil it is looked up from the
// device's product name. The GPU is named in errors by its UUID when NVML reports one.
func NewInstanceManager(dev nvml.Device, m *mig.Model) (*InstanceManager, error) {
	if dev == nil {
		return nil, errNilDevice("NewInstanceManager")
	}
	label := "(unknown)"
	if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		label = uuid
	}
	if m == nil {
		name, ret := dev.GetName()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get name of GPU %s: %w", label, ret)
		}
		var err error
		if m, err = mig.Lookup(name); err != nil {
			return nil, fmt.Errorf("GPU %s: %w", label, err)
		}
	}
	return &InstanceManager{dev: dev, model: m, label: label}, nil
}

// Model returns the model the InstanceManager validates layouts against.
func (mg *InstanceManager) Model() *mig.Model { return mg.model }

// ResetRequiredError says MIG mode was requested but only takes effect after a GPU reset (or the
// GPU is busy); no instance was created.
type ResetRequiredError struct {
	// GPU names the GPU (its UUID).
	GPU string
	// Status is NVML's activation status, when it gave one.
	Status nvml.Return
}

// Error implements error.
func (e *ResetRequiredError) Error() string {
	return fmt.Sprintf("MIG mode on GPU %s is pending and needs a GPU reset to take effect (activation status: %v)", e.GPU, e.Status)
}

// EnableMIG turns MIG mode on if it is off. It reports resetRequired when the new mode is pending
// until a reset (NVML's activation status ERROR_RESET_REQUIRED or ERROR_IN_USE, or the current mode
// still off afterwards).
func (mg *InstanceManager) EnableMIG() (resetRequired bool, err error) {
	cur, pending, ret := mg.dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return false, fmt.Errorf("get MIG mode of GPU %s: %w", mg.label, ret)
	}
	if cur == nvml.DEVICE_MIG_ENABLE {
		return false, nil
	}
	if pending == nvml.DEVICE_MIG_ENABLE {
		return true, nil
	}
	status, ret := mg.dev.SetMigMode(nvml.DEVICE_MIG_ENABLE) // go-nvml: (activation status, return)
	if ret != nvml.SUCCESS {
		return false, fmt.Errorf("enable MIG mode on GPU %s: %w", mg.label, ret)
	}
	if status == nvml.ERROR_RESET_REQUIRED || status == nvml.ERROR_IN_USE {
		return true, nil
	}
	cur, _, ret = mg.dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return false, fmt.Errorf("get MIG mode of GPU %s after enabling it: %w", mg.label, ret)
	}
	return cur != nvml.DEVICE_MIG_ENABLE, nil
}

// DisableMIG turns MIG mode off if it is on. A GPU instance that still exists is an error naming
// it (destroy the instances first). changed reports that MIG mode was on and was asked off; a
// GPU already out of MIG mode (or without MIG support) changes nothing. It reports
// resetRequired when the new mode is pending until a reset, as EnableMIG does.
func (mg *InstanceManager) DisableMIG() (changed, resetRequired bool, err error) {
	cur, pending, ret := mg.dev.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return false, false, nil
	}
	if ret != nvml.SUCCESS {
		return false, false, fmt.Errorf("get MIG mode of GPU %s: %w", mg.label, ret)
	}
	if cur != nvml.DEVICE_MIG_ENABLE {
		return false, pending == nvml.DEVICE_MIG_ENABLE, nil
	}
	current, err := mg.Current()
	if err != nil {
		return false, false, err
	}
	if len(current) > 0 {
		return false, false, fmt.Errorf("disable MIG mode on GPU %s: GPU instances exist: %s", mg.label, mig.FormatLayout(current))
	}
	status, ret := mg.dev.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	if ret != nvml.SUCCESS {
		return false, false, fmt.Errorf("disable MIG mode on GPU %s: %w", mg.label, ret)
	}
	if status == nvml.ERROR_RESET_REQUIRED || status == nvml.ERROR_IN_USE {
		return true, true, nil
	}
	cur, _, ret = mg.dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return true, false, fmt.Errorf("get MIG mode of GPU %s after disabling it: %w", mg.label, ret)
	}
	return true, cur == nvml.DEVICE_MIG_ENABLE, nil
}

// Current returns the GPU instances that exist now, as placed Instances sorted by placement. A
// GPU instance whose profile the model does not know is an error: its slices would be invisible
// to validation.
func (mg *InstanceManager) Current() ([]mig.Instance, error) {
	states, err := mg.Instances()
	if err != nil {
		return nil, err
	}
	out := make([]mig.Instance, 0, len(states))
	for _, st := range states {
		p, err := mg.profileOf(st)
		if err != nil {
			return nil, err
		}
		pl := st.Placement
		out = append(out, mig.Instance{Profile: p.Name, Placement: &pl})
	}
	return out, nil
}

// Instances returns the GPU instances that exist now with their compute instances, as
// ListInstances does.
func (mg *InstanceManager) Instances() ([]GPUInstanceState, error) {
	states, err := ListInstances(mg.dev)
	if err != nil {
		return nil, fmt.Errorf("list MIG instances of GPU %s: %w", mg.label, err)
	}
	return states, nil
}

func (mg *InstanceManager) profileOf(st GPUInstanceState) (*mig.GIProfile, error) {
	p, ok := mg.model.ProfileByID(int(st.Profile.Id))
	if !ok {
		return nil, fmt.Errorf("GPU %s has a GPU instance %d at placement %d with profile Id %d, which the %s geometry does not know",
			mg.label, st.ID, st.Placement.Start, st.Profile.Id, mg.model.Name)
	}
	return p, nil
}

// find returns the GPU instance of profile p at placement start, nil when there is none.
func (mg *InstanceManager) find(p *mig.GIProfile, start int) (*GPUInstanceState, error) {
	states, err := mg.Instances()
	if err != nil {
		return nil, err
	}
	for i := range states {
		if int(states[i].Profile.Id) == p.ID && states[i].Placement.Start == start {
			return &states[i], nil
		}
	}
	return nil, nil
}

// Created describes one instance Apply made or found.
type Created struct {
	// Instance is the profile and placement.
	Instance mig.Instance
	// GPUInstanceID and ComputeInstanceID are NVML's ids.
	GPUInstanceID, ComputeInstanceID int
	// Reused is true when the GPU instance already existed at that placement (Apply is
	// idempotent); its full-size compute instance was reused too, or created if missing.
	Reused bool
}

// undo is what Apply must destroy on failure.
type undo struct {
	gi nvml.GpuInstance // nil when the GPU instance was reused
	ci nvml.ComputeInstance
}

// Apply makes the layout exist on the GPU: it enables MIG mode if needed (a *ResetRequiredError
// when that needs a reset), validates the layout together with the instances that already exist
// (placing unplaced instances as mig.Plan does), then for each instance creates the GPU instance at
// its placement (CreateGpuInstanceWithPlacement with the profile info NVML returns for the
// profile's enum) and a compute instance spanning it. An instance whose profile already exists at
// that placement is reused, not duplicated. On any failure everything this call created is
// destroyed (compute instances first, in reverse order) and the NVML error is returned wrapped with
// the step, profile, placement and GPU.
func (mg *InstanceManager) Apply(layout []mig.Instance) (_ []Created, err error) {
	reset, err := mg.EnableMIG()
	if err != nil {
		return nil, err
	}
	if reset {
		return nil, &ResetRequiredError{GPU: mg.label}
	}
	current, err := mg.Current()
	if err != nil {
		return nil, err
	}
	targets, reuse, err := mg.targets(layout, current)
	if err != nil {
		return nil, err
	}
	var undos []undo
	defer func() {
		if err != nil {
			err = rollBack(err, undos)
		}
	}()
	out := make([]Created, 0, len(layout))
	for i, target := range targets {
		c, u, err := mg.create(target, reuse[i])
		if u.gi != nil || u.ci != nil {
			undos = append(undos, u)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// targets returns, for each instance of the layout, the placed instance Apply makes exist, and
// whether it already exists (reuse). New instances are validated together with current, the
// instances on the GPU, and placed where the layout leaves them unplaced.
func (mg *InstanceManager) targets(layout, current []mig.Instance) (targets []mig.Instance, reuse []bool, err error) {
	reuse = mg.existing(layout, current)
	var fresh []mig.Instance
	for i, in := range layout {
		if !reuse[i] {
			fresh = append(fresh, in)
		}
	}
	planned, err := mig.Validate(mg.model, append(slices.Clone(current), fresh...))
	if err != nil {
		return nil, nil, fmt.Errorf("apply %s on GPU %s: %w", mig.FormatLayout(layout), mg.label, err)
	}
	planned = planned[len(current):]
	targets = make([]mig.Instance, len(layout))
	for i, in := range layout {
		if !reuse[i] {
			targets[i], planned = planned[0], planned[1:]
			continue
		}
		p, _ := mg.model.Profile(in.Profile)
		pl := mig.Placement{Start: in.Placement.Start, Size: p.MemorySlices()}
		targets[i] = mig.Instance{Profile: p.Name, Placement: &pl}
	}
	return targets, reuse, nil
}

// existing says which placed instances of the layout already exist among current, each existing
// instance matching at most one.
func (mg *InstanceManager) existing(layout, current []mig.Instance) []bool {
	taken := make([]bool, len(current))
	reuse := make([]bool, len(layout))
	for i, in := range layout {
		if in.Placement == nil {
			continue
		}
		p, ok := mg.model.Profile(in.Profile)
		if !ok {
			continue // Validate reports it
		}
		for j, c := range current {
			if !taken[j] && c.Profile == p.Name && c.Placement.Start == in.Placement.Start {
				taken[j], reuse[i] = true, true
				break
			}
		}
	}
	return reuse
}

// rollBack destroys what a failed Apply created, newest first (each compute instance before its
// GPU instance), and returns err joined with every failure to destroy.
func rollBack(err error, undos []undo) error {
	errs := []error{err}
	for _, u := range slices.Backward(undos) {
		if u.ci != nil {
			if ret := u.ci.Destroy(); ret != nvml.SUCCESS {
				errs = append(errs, fmt.Errorf("roll back: destroy compute instance: %w", ret))
			}
		}
		if u.gi != nil {
			if ret := u.gi.Destroy(); ret != nvml.SUCCESS {
				errs = append(errs, fmt.Errorf("roll back: destroy GPU instance: %w", ret))
			}
		}
	}
	if len(errs) == 1 {
		return err
	}
	return errors.Join(errs...)
}

// create makes (or finds) one GPU instance and its full compute instance.
func (mg *InstanceManager) create(in mig.Instance, reuse bool) (Created, undo, error) {
	var u undo
	p, _ := mg.model.Profile(in.Profile)
	c := Created{Instance: in, Reused: reuse}
	where := fmt.Sprintf("%s at %d on GPU %s", p.Name, in.Placement.Start, mg.label)
	info, ret := mg.dev.GetGpuInstanceProfileInfo(p.Enum)
	if ret != nvml.SUCCESS {
		return c, u, fmt.Errorf("get GPU instance profile info for %s: %w", where, ret)
	}
	var gi nvml.GpuInstance
	var existing *GPUInstanceState
	if reuse {
		var err error
		if existing, err = mg.find(p, in.Placement.Start); err != nil {
			return c, u, err
		}
		if existing == nil {
			return c, u, fmt.Errorf("GPU instance %s disappeared", where)
		}
		gi = existing.Handle
	} else {
		pl := nvml.GpuInstancePlacement{Start: uint32(in.Placement.Start), Size: uint32(in.Placement.Size)}
		gi, ret = mg.dev.CreateGpuInstanceWithPlacement(&info, &pl)
		if ret != nvml.SUCCESS {
			return c, u, fmt.Errorf("create GPU instance %s: %w", where, ret)
		}
		u.gi = gi
	}
	gii, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return c, u, fmt.Errorf("get GPU instance info for %s: %w", where, ret)
	}
	c.GPUInstanceID = int(gii.Id)
	ciEnum := fullComputeProfileEnum(p.ComputeSlices)
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciEnum, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return c, u, fmt.Errorf("get compute instance profile info (%d slices) for %s: %w", p.ComputeSlices, where, ret)
	}
	if existing != nil && len(existing.ComputeInstances) > 0 {
		c.ComputeInstanceID = existing.ComputeInstances[0].ID
		return c, u, nil
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		return c, u, fmt.Errorf("create compute instance (%d slices) in GPU instance %s: %w", p.ComputeSlices, where, ret)
	}
	u.ci = ci
	cii, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return c, u, fmt.Errorf("get compute instance info of %s: %w", where, ret)
	}
	c.ComputeInstanceID = int(cii.Id)
	return c, u, nil
}

// Remove destroys the GPU instances of the layout (matched by profile and placement start; every
// instance must be placed) and all their compute instances, compute instances first. Instances
// that do not exist are skipped, so Remove is idempotent. It stops at the first NVML failure.
func (mg *InstanceManager) Remove(layout []mig.Instance) error {
	for _, in := range layout {
		if in.Placement == nil {
			return fmt.Errorf("remove %s from GPU %s: no placement given", in.Profile, mg.label)
		}
	}
	for i := len(layout) - 1; i >= 0; i-- {
		in := layout[i]
		p, ok := mg.model.Profile(in.Profile)
		if !ok {
			return fmt.Errorf("remove from GPU %s: unknown profile %q (profiles of %s: %v)", mg.label, in.Profile, mg.model.Name, mg.model.ProfileNames())
		}
		st, err := mg.find(p, in.Placement.Start)
		if err != nil {
			return err
		}
		if st == nil {
			continue
		}
		if err := mg.destroy(st, fmt.Sprintf("%s at %d on GPU %s", p.Name, in.Placement.Start, mg.label)); err != nil {
			return err
		}
	}
	return nil
}

// destroy destroys a GPU instance's compute instances, newest first, then the GPU instance.
func (mg *InstanceManager) destroy(st *GPUInstanceState, where string) error {
	for _, ci := range slices.Backward(st.ComputeInstances) {
		if ret := ci.Handle.Destroy(); ret != nvml.SUCCESS {
			return fmt.Errorf("destroy compute instance %d of %s: %w", ci.ID, where, ret)
		}
	}
	if ret := st.Handle.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("destroy GPU instance %s: %w", where, ret)
	}
	return nil
}

// fullComputeProfileEnum is the COMPUTE_INSTANCE_PROFILE_* enum of a compute instance of c
// compute slices, the one that spans a GPU instance of c slices; -1 for a count NVML has none for.
func fullComputeProfileEnum(c int) int {
	switch c {
	case 1:
		return nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE
	case 2:
		return nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE
	case 3:
		return nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE
	case 4:
		return nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE
	case 6:
		return nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE
	case 7:
		return nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE
	case 8:
		return nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE
	}
	return -1
}
