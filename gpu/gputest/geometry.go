package gputest

import (
	"errors"
	"fmt"

	"github.com/gpudra/gpudra/mig"
)

// machineGeometry is the one place the fakes take MIG geometry from: the recorded nvidia-smi
// output of the product where there is some (recordedModel), the mig catalog for the rest. It
// returns nil for products without MIG and for MIG-capable products the catalog does not know
// (they answer GetMigMode but have no GPU-instance profiles; TestCatalogCoversMachines catches
// that case).
func machineGeometry(g gpuModel) (*mig.Model, error) {
	if !g.migCapable {
		return nil, nil
	}
	cat, err := mig.Lookup(g.productName)
	var unknown *mig.UnknownModelError
	if errors.As(err, &unknown) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	recs, err := Recordings()
	if err != nil {
		return nil, err
	}
	m, err := recordedModel(cat, recs)
	if err != nil {
		return nil, fmt.Errorf("gputest: MIG geometry of %s: %w", g.productName, err)
	}
	return m, nil
}

// WithMIGProfileEdit changes the GPU-instance profile named profile on every GPU whose MIG
// geometry has it, before the machine starts: edit may change what NVML reports for it (memory,
// SM and engine counts, instance count, placements). It models a driver release or a GPU whose
// profiles differ from the mig catalog, for testing code that must follow the device
// (nvmlmig.ModelFromDevice, mig.Compare). The Id and name should stay: the fake finds profiles by
// them. No GPU with the profile is an error at New.
func WithMIGProfileEdit(profile string, edit func(p *mig.GIProfile)) Option {
	return func(c *config) error {
		if profile == "" || edit == nil {
			return fmt.Errorf("gputest: WithMIGProfileEdit: want a profile name and an edit function")
		}
		c.profileEdits = append(c.profileEdits, profileEdit{profile: profile, edit: edit})
		return nil
	}
}

type profileEdit struct {
	profile string
	edit    func(p *mig.GIProfile)
}

// applyProfileEdits runs the WithMIGProfileEdit functions on the devices' geometries.
func (m *Machine) applyProfileEdits(edits []profileEdit) error {
	for _, e := range edits {
		found := false
		for _, d := range m.devices {
			if d.geometry == nil {
				continue
			}
			if p, ok := d.geometry.Profile(e.profile); ok && p.Name == e.profile {
				e.edit(p)
				found = true
			}
		}
		if !found {
			return fmt.Errorf("gputest: WithMIGProfileEdit: no GPU of machine %s has profile %q", m.spec.name, e.profile)
		}
	}
	return nil
}

// MIGModel returns a copy of the MIG geometry GPU gpuIndex serves through NVML, or nil when the
// GPU has none. Each profile's Sources say which values come from a recorded nvidia-smi printout
// (mig.SourceRecorded) and which from the catalog's documentation or inference: a fake built from
// inferred data says so there.
func (m *Machine) MIGModel(gpuIndex int) *mig.Model {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.deviceLocked(gpuIndex)
	if err != nil || d.geometry == nil {
		return nil
	}
	return d.geometry.Clone()
}
