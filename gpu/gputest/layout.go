package gputest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/input"
	"github.com/gpudra/gpudra/mig"
)

// WithMIG starts GPU gpuIndex with MIG mode enabled and the given MIG devices. Each profile is a
// MIG device name as the mig catalog spells it for the GPU's model ("3g.20gb", "1g.10gb+me"),
// optionally a compute-instance form ("1c.3g.20gb": a 1-slice compute instance in a 3g.20gb GPU
// instance) and optionally "@start" to fix the GPU instance's placement in memory slices
// ("3g.20gb@4"). Profiles without a placement are placed where they fit. Every device is created
// through the same code as CreateGpuInstanceWithPlacement and CreateComputeInstance, so the
// layout must be one the hardware accepts. No profiles: MIG mode on, no instances.
func WithMIG(gpuIndex int, profiles ...string) Option {
	return func(c *config) error {
		if gpuIndex < 0 {
			return fmt.Errorf("gputest: WithMIG: GPU index %d is negative", gpuIndex)
		}
		if c.mig == nil {
			c.mig = map[int][]string{}
		}
		c.mig[gpuIndex] = slices.Clone(profiles)
		return nil
	}
}

// WithMIGAll is WithMIG for every GPU of the machine. It is an error on a machine without MIG.
func WithMIGAll(profiles ...string) Option {
	return func(c *config) error {
		c.migAll = slices.Clone(profiles)
		if c.migAll == nil {
			c.migAll = []string{}
		}
		return nil
	}
}

// WithMIGConfig starts the machine in a mig-parted configuration: a built-in name such as
// "all-balanced", "all-1g.5gb", "all-enabled" or "all-disabled" (see mig.BuiltinConfigs), or the
// path of a mig-parted "version: v1" file holding exactly one configuration (at most
// input.ConfigLimit, 1 MiB). The configuration is
// checked against the machine first (mig.CheckConfig), so a layout the GPUs cannot hold is an
// error at New; GPUs without MIG are left alone. WithMIG and WithMIGAll override it per GPU.
// Compute-instance forms ("1c.3g.20gb") get whole-GPU-instance compute instances here.
func WithMIGConfig(nameOrFile string) Option {
	return func(c *config) error {
		if nameOrFile == "" {
			return fmt.Errorf("gputest: WithMIGConfig: empty name")
		}
		data, err := input.ReadFile(context.Background(), nameOrFile, input.ConfigLimit)
		switch {
		case err == nil:
			spec, perr := mig.ParseConfig(data)
			if perr != nil {
				return fmt.Errorf("gputest: WithMIGConfig %s: %w", nameOrFile, perr)
			}
			if len(spec.MigConfigs) != 1 {
				return fmt.Errorf("gputest: WithMIGConfig %s: the file has %d configurations (%s); use WithMIGConfigFile to pick one",
					nameOrFile, len(spec.MigConfigs), strings.Join(slices.Sorted(maps.Keys(spec.MigConfigs)), ", "))
			}
			for name := range spec.MigConfigs {
				c.migSpec, c.migSpecName, c.migSpecSource = spec, name, nameOrFile
			}
			return nil
		case errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(nameOrFile, os.PathSeparator):
			spec := mig.BuiltinConfigs()
			if _, ok := spec.MigConfigs[nameOrFile]; !ok {
				return fmt.Errorf("gputest: WithMIGConfig: %q is neither a file nor a built-in mig-parted configuration (built-in: %s)",
					nameOrFile, strings.Join(slices.Sorted(maps.Keys(spec.MigConfigs)), ", "))
			}
			c.migSpec, c.migSpecName, c.migSpecSource = spec, nameOrFile, "built-in configurations"
			return nil
		default:
			return fmt.Errorf("gputest: WithMIGConfig: %w", err)
		}
	}
}

// WithMIGConfigFile starts the machine in configuration name of the mig-parted file at path (at
// most 1 MiB).
func WithMIGConfigFile(path, name string) Option {
	return func(c *config) error {
		data, err := input.ReadFile(context.Background(), path, input.ConfigLimit)
		if err != nil {
			return fmt.Errorf("gputest: WithMIGConfigFile: %w", err)
		}
		spec, err := mig.ParseConfig(data)
		if err != nil {
			return fmt.Errorf("gputest: WithMIGConfigFile %s: %w", path, err)
		}
		c.migSpec, c.migSpecName, c.migSpecSource = spec, name, path
		return nil
	}
}

// configLayouts turns the machine's mig-parted configuration into per-GPU layouts.
func (m *Machine) configLayouts(c *config, layouts map[int][]string) error {
	gpus := make([]mig.GPUInfo, len(m.devices))
	for i, d := range m.devices {
		gpus[i] = mig.GPUInfo{Index: i, Model: d.geometry, ProductName: d.model.productName,
			PCIDeviceID: d.model.pciDeviceID, PCISubsystemID: d.model.pciSubsystemID}
		if d.geometry == nil {
			gpus[i].ProductName, gpus[i].PCIDeviceID = "", 0 // not MIG-capable for CheckConfig
		}
	}
	plans, err := mig.CheckConfig(c.migSpec, c.migSpecName, gpus)
	if err != nil {
		return fmt.Errorf("gputest: machine %s, %s: %w", m.spec.name, c.migSpecSource, err)
	}
	for _, p := range plans {
		if !p.MigEnabled {
			continue
		}
		l := []string{}
		for _, in := range p.Layout {
			if in.Placement != nil {
				l = append(l, fmt.Sprintf("%s@%d", in.Profile, in.Placement.Start))
			} else {
				l = append(l, in.Profile)
			}
		}
		layouts[p.Index] = l
	}
	return nil
}

func (m *Machine) applyMIG(c *config) error {
	layouts := map[int][]string{}
	if c.migSpec != nil {
		if err := m.configLayouts(c, layouts); err != nil {
			return err
		}
	}
	if c.migAll != nil {
		for i := range m.devices {
			layouts[i] = c.migAll
		}
	}
	for i, l := range c.mig {
		if i >= len(m.devices) {
			return fmt.Errorf("gputest: WithMIG: machine %s has no GPU %d (valid: 0..%d)", m.spec.name, i, len(m.devices)-1)
		}
		layouts[i] = l
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.devices {
		l, ok := layouts[i]
		if !ok {
			continue
		}
		if err := m.devices[i].applyLayout(l); err != nil {
			return fmt.Errorf("gputest: MIG layout of GPU %d (%s) on %s: %w", i, m.devices[i].model.productName, m.spec.name, err)
		}
	}
	return nil
}

type layoutEntry struct {
	spec string
	gi   *mig.GIProfile
	ci   *mig.ComputeProfile
	at   *mig.Placement
}

// applyLayout enables MIG and creates the layout. The caller holds m.mu.
func (d *Device) applyLayout(profiles []string) error {
	if !d.model.migCapable {
		return fmt.Errorf("the GPU does not support MIG")
	}
	if d.geometry == nil {
		return fmt.Errorf("the mig catalog has no geometry for this GPU")
	}
	d.migMode = nvml.DEVICE_MIG_ENABLE
	entries := make([]layoutEntry, len(profiles))
	for i, s := range profiles {
		e, err := d.parseEntry(s)
		if err != nil {
			return err
		}
		entries[i] = e
	}
	if !placeEntries(entries) {
		return fmt.Errorf("profiles %s do not fit on %d memory slices without overlap", strings.Join(profiles, ","), d.geometry.MemorySlices)
	}
	for _, e := range entries {
		gi, ret := d.createGI(e.gi, e.at)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("profile %q at placement %d:%d: CreateGpuInstanceWithPlacement: %v (at most %d instances of %s; layout so far %s)",
				e.spec, e.at.Start, e.at.Size, ret, e.gi.InstanceCount, e.gi.Name, d.layoutString())
		}
		if _, ret := gi.createCI(e.ci, nil); ret != nvml.SUCCESS {
			return fmt.Errorf("profile %q: CreateComputeInstance: %v", e.spec, ret)
		}
	}
	return nil
}

func (d *Device) parseEntry(s string) (layoutEntry, error) {
	name, startStr, hasAt := strings.Cut(strings.TrimSpace(s), "@")
	gp, ok := d.geometry.Profile(name)
	if !ok {
		return layoutEntry{}, fmt.Errorf("profile %q: unknown on %s; known profiles: %s", s, d.geometry.Name, strings.Join(d.geometry.ProfileNames(), ", "))
	}
	e := layoutEntry{spec: s, gi: gp}
	slicesWanted := gp.ComputeSlices
	if p, err := mig.ParseProfile(name); err == nil && p.C != 0 {
		slicesWanted = p.C
	}
	for i := range gp.ComputeProfiles {
		c := &gp.ComputeProfiles[i]
		if c.Slices == slicesWanted && (e.ci == nil || c.Enum < e.ci.Enum) {
			e.ci = c
		}
	}
	if e.ci == nil {
		return layoutEntry{}, fmt.Errorf("profile %q: %s has no %d-slice compute instance profile", s, gp.Name, slicesWanted)
	}
	if hasAt {
		start, err := strconv.Atoi(startStr)
		if err != nil {
			return layoutEntry{}, fmt.Errorf("profile %q: placement %q is not a number", s, startStr)
		}
		pl := mig.Placement{Start: start, Size: gp.MemorySlices()}
		if !gp.AllowsPlacement(pl) {
			starts := make([]string, len(gp.Placements))
			for i, q := range gp.Placements {
				starts[i] = strconv.Itoa(q.Start)
			}
			return layoutEntry{}, fmt.Errorf("profile %q: %s cannot start at memory slice %d; allowed starts: %s", s, gp.Name, start, strings.Join(starts, ", "))
		}
		e.at = &pl
	}
	return e, nil
}

// placeEntries gives every entry without a placement one that overlaps no other entry, trying
// placements in catalog order and backtracking. It reports whether that is possible.
func placeEntries(es []layoutEntry) bool {
	var used []mig.Placement
	var open []int
	for i, e := range es {
		if e.at == nil {
			open = append(open, i)
			continue
		}
		if slices.ContainsFunc(used, e.at.Overlaps) {
			return false
		}
		used = append(used, *e.at)
	}
	var try func(k int) bool
	try = func(k int) bool {
		if k == len(open) {
			return true
		}
		e := &es[open[k]]
		for _, pl := range e.gi.Placements {
			if slices.ContainsFunc(used, pl.Overlaps) {
				continue
			}
			used = append(used, pl)
			if try(k + 1) {
				e.at = &pl
				return true
			}
			used = used[:len(used)-1]
		}
		return false
	}
	return try(0)
}

// layoutString renders the current GPU instances as "3g.20gb@0,2g.10gb@4".
func (d *Device) layoutString() string {
	var parts []string
	for _, gi := range d.sortedGIs() {
		parts = append(parts, fmt.Sprintf("%s@%d", gi.profile.Name, gi.placement.Start))
	}
	if parts == nil {
		return "(empty)"
	}
	return strings.Join(parts, ",")
}

// GPUInstanceState describes one GPU instance of a fake GPU, for test assertions.
type GPUInstanceState struct {
	// ID is the GPU instance id.
	ID int
	// Profile is the GPU-instance profile name, e.g. "3g.20gb".
	Profile string
	// ProfileID is the NVML profile Id (not the enum).
	ProfileID int
	// Placement is where the instance sits, in memory slices.
	Placement mig.Placement
	// ComputeInstances are the instance's compute instances, by id.
	ComputeInstances []ComputeInstanceState
}

// ComputeInstanceState describes one compute instance, for test assertions.
type ComputeInstanceState struct {
	// ID is the compute instance id within its GPU instance.
	ID int
	// Profile is the MIG device's profile name: "3g.20gb", or "1c.3g.20gb" when the compute
	// instance is smaller than its GPU instance.
	Profile string
	// ProfileID is the NVML compute-instance profile Id.
	ProfileID int
	// Start and Size are the compute-slice placement.
	Start, Size int
	// UUID is the MIG device UUID ("MIG-…").
	UUID string
}

// GPUInstances returns the GPU instances of GPU gpuIndex now, ordered by id; nil for a bad
// index or a GPU without instances.
func (m *Machine) GPUInstances(gpuIndex int) []GPUInstanceState {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.deviceLocked(gpuIndex)
	if err != nil {
		return nil
	}
	d.sync()
	var out []GPUInstanceState
	for _, gi := range d.sortedGIs() {
		s := GPUInstanceState{ID: int(gi.id), Profile: gi.profile.Name, ProfileID: gi.profile.ID, Placement: gi.placement}
		for _, id := range sortedKeys(gi.cis) {
			ci := gi.cis[id]
			s.ComputeInstances = append(s.ComputeInstances, ComputeInstanceState{
				ID: int(ci.id), Profile: ci.dev.profileName(), ProfileID: ci.profile.ID,
				Start: ci.start, Size: ci.profile.Slices, UUID: ci.dev.uuid,
			})
		}
		out = append(out, s)
	}
	return out
}

// MIGEnabled reports the MIG mode of GPU gpuIndex.
func (m *Machine) MIGEnabled(gpuIndex int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.deviceLocked(gpuIndex)
	if err != nil {
		return false
	}
	d.sync()
	return d.migMode == nvml.DEVICE_MIG_ENABLE
}
