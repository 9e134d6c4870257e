package mig

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/internal/input"
)

// ConfigSpec is a mig-parted configuration file ("version: v1"): named MIG configurations, each a
// list of entries applied to the GPUs they select.
type ConfigSpec struct {
	// Version must be "v1".
	Version string `json:"version"`
	// MigConfigs maps a configuration name (e.g. "all-balanced") to its entries.
	MigConfigs map[string][]ConfigEntry `json:"mig-configs"`
}

// ConfigEntry is one entry of a named configuration.
type ConfigEntry struct {
	// DeviceFilter optionally restricts the entry to GPUs with these PCI ids: "0x20B010DE" (device
	// id and vendor id) or "0x20B010DE:0x<subsystem device><subsystem vendor>". YAML may give one
	// string or a list.
	DeviceFilter DeviceFilter `json:"device-filter,omitempty"`
	// Devices selects GPUs by index: "all" or a list of indexes.
	Devices Devices `json:"devices"`
	// MigEnabled is whether MIG mode is on. Required.
	MigEnabled *bool `json:"mig-enabled"`
	// MigDevices maps profile names to instance counts. Required (possibly empty) when MigEnabled.
	MigDevices map[string]int `json:"mig-devices,omitempty"`
}

// Devices is the "devices" field: all GPUs, or the listed indexes.
type Devices struct {
	// All is true for "devices: all".
	All bool
	// Indexes are the GPU indexes when All is false.
	Indexes []int
	set     bool
}

// UnmarshalJSON accepts "all" or a list of non-negative integers.
func (d *Devices) UnmarshalJSON(b []byte) error {
	d.set = true
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != "all" {
			return fmt.Errorf("invalid string %q for devices: want \"all\" or a list of GPU indexes", s)
		}
		d.All = true
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d.Indexes); err != nil {
		return fmt.Errorf("devices must be \"all\" or a list of GPU indexes: %w", err)
	}
	for _, i := range d.Indexes {
		if i < 0 {
			return fmt.Errorf("devices: negative GPU index %d", i)
		}
	}
	return nil
}

// MarshalJSON writes "all" or the index list.
func (d Devices) MarshalJSON() ([]byte, error) {
	if d.All {
		return json.Marshal("all")
	}
	return json.Marshal(d.Indexes)
}

// DevicesAll returns Devices selecting every GPU.
func DevicesAll() Devices { return Devices{All: true, set: true} }

// DeviceFilter is the "device-filter" field: PCI ids as strings.
type DeviceFilter []string

// UnmarshalJSON accepts one string or a list of strings.
func (f *DeviceFilter) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = DeviceFilter{s}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("device-filter must be a PCI id string or a list of them: %w", err)
	}
	*f = l
	return nil
}

// Matches reports whether a GPU with the given PCI ids passes the filter (an empty filter passes
// every GPU). Entries that do not parse match nothing, as in mig-parted.
func (f DeviceFilter) Matches(pciDeviceID, pciSubsystemID uint32) bool {
	if len(f) == 0 {
		return true
	}
	for _, e := range f {
		dev, sub, hasSub := strings.Cut(e, ":")
		d, err := strconv.ParseUint(dev, 0, 32)
		if err != nil || uint32(d) != pciDeviceID {
			continue
		}
		if !hasSub {
			return true
		}
		s, err := strconv.ParseUint(sub, 0, 32)
		if err == nil && uint32(s) == pciSubsystemID {
			return true
		}
	}
	return false
}

// ParseConfig parses and checks a mig-parted v1 configuration strictly: unknown or duplicate fields
// are errors, "version" must be "v1", every configuration needs at least one entry, every entry
// needs "devices" and "mig-enabled", "mig-devices" is required when MIG is enabled and forbidden
// when it is not, profile names must be well-formed, counts non-negative and not all zero.
// Errors name the field path, e.g. mig-configs["custom"][1].mig-devices["3g.20gb"].
func ParseConfig(data []byte) (*ConfigSpec, error) {
	var spec ConfigSpec
	if err := input.UnmarshalStrict(data, &spec); err != nil {
		return nil, fmt.Errorf("parse mig-parted config: %w", err)
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return &spec, nil
}

// Validate checks the format rules that ParseConfig applies.
func (s *ConfigSpec) Validate() error {
	switch s.Version {
	case "v1":
	case "":
		return errors.New("mig-parted config: missing required field version (want \"v1\")")
	default:
		return fmt.Errorf("mig-parted config: unknown version %q (want \"v1\")", s.Version)
	}
	if len(s.MigConfigs) == 0 {
		return errors.New("mig-parted config: mig-configs needs at least one entry")
	}
	var errs []error
	for _, name := range slices.Sorted(mapKeys(s.MigConfigs)) {
		entries := s.MigConfigs[name]
		if len(entries) == 0 {
			errs = append(errs, fmt.Errorf("mig-configs[%q]: needs at least one entry", name))
		}
		for i, e := range entries {
			path := fmt.Sprintf("mig-configs[%q][%d]", name, i)
			if !e.Devices.set && !e.Devices.All && e.Devices.Indexes == nil {
				errs = append(errs, fmt.Errorf("%s: missing required field devices (\"all\" or a list of GPU indexes)", path))
			}
			if e.MigEnabled == nil {
				errs = append(errs, fmt.Errorf("%s: missing required field mig-enabled", path))
				continue
			}
			if !*e.MigEnabled {
				if e.MigDevices != nil {
					errs = append(errs, fmt.Errorf("%s: mig-devices given while mig-enabled is false", path))
				}
				continue
			}
			if e.MigDevices == nil {
				errs = append(errs, fmt.Errorf("%s: missing required field mig-devices when mig-enabled is true (use {} for none)", path))
				continue
			}
			nonzero := false
			for _, prof := range slices.Sorted(mapKeys(e.MigDevices)) {
				c := e.MigDevices[prof]
				if _, err := ParseProfile(prof); err != nil {
					errs = append(errs, fmt.Errorf("%s.mig-devices[%q]: %w", path, prof, err))
				}
				if c < 0 {
					errs = append(errs, fmt.Errorf("%s.mig-devices[%q]: count %d is negative", path, prof, c))
				}
				nonzero = nonzero || c > 0
			}
			if len(e.MigDevices) > 0 && !nonzero {
				errs = append(errs, fmt.Errorf("%s.mig-devices: all counts are 0", path))
			}
		}
	}
	return errors.Join(errs...)
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// GPUInfo identifies one GPU of a machine for CheckConfig.
type GPUInfo struct {
	// Index is the GPU's NVML index (what "devices: [i]" refers to).
	Index int
	// Model is the GPU's catalog model; when nil, ProductName and then PCIDeviceID are looked up.
	// A GPU that resolves to no model is treated as not MIG-capable.
	Model *Model
	// ProductName is the NVML product name.
	ProductName string
	// PCIDeviceID is the combined PCI device/vendor id (0x20B010DE), for device-filter.
	PCIDeviceID uint32
	// PCISubsystemID is the combined subsystem id, for device-filter entries that give one.
	PCISubsystemID uint32
}

func (g GPUInfo) model() *Model {
	if g.Model != nil {
		return g.Model
	}
	if g.ProductName != "" {
		if m, err := Lookup(g.ProductName); err == nil {
			return m
		}
	}
	if g.PCIDeviceID != 0 {
		if m, err := LookupPCIDeviceID(g.PCIDeviceID); err == nil {
			return m
		}
	}
	return nil
}

// DevicePlan is what a configuration asks of one GPU.
type DevicePlan struct {
	// Index is the GPU index.
	Index int
	// Model is the canonical model name ("" when the GPU is not MIG-capable).
	Model string
	// MigEnabled is the requested MIG mode.
	MigEnabled bool
	// Layout is the validated layout, every instance placed (nil when MIG is disabled).
	Layout []Instance
}

// CheckConfig validates the named configuration against a machine up front: for every GPU it finds
// the entries that select it (by index and device-filter; when several do, the last wins, as when
// mig-parted applies them in order), turns mig-devices into a layout and validates it on the GPU's
// model. Compute-instance profiles such as "1c.3g.20gb" are packed into as few GPU instances as their
// compute-profile instance count allows. A MIG-capable GPU no entry selects is an error (the
// configuration says nothing about it); a GPU that is not MIG-capable is skipped unless an entry
// selects it by index with mig-enabled true. Errors name the configuration, GPU index, model and
// profile.
func CheckConfig(spec *ConfigSpec, configName string, gpus []GPUInfo) ([]DevicePlan, error) {
	if spec == nil {
		return nil, errors.New("mig: CheckConfig: nil *ConfigSpec (use ParseConfig or BuiltinConfigs)")
	}
	entries, ok := spec.MigConfigs[configName]
	if !ok {
		return nil, fmt.Errorf("mig config %q not present (available: %s)", configName, strings.Join(slices.Sorted(mapKeys(spec.MigConfigs)), ", "))
	}
	var plans []DevicePlan
	problems := gpuErrors{config: configName}
	for _, gpu := range gpus {
		m := gpu.model()
		chosen := chooseEntry(entries, gpu, m)
		if m == nil {
			if chosen != nil && !chosen.Devices.All && chosen.MigEnabled != nil && *chosen.MigEnabled {
				problems.add(gpu.Index, gpu.ProductName, errors.New("cannot enable MIG on a GPU that is not MIG-capable"))
			}
			continue
		}
		if chosen == nil {
			problems.add(gpu.Index, m.Name, errors.New("no entry applies to this GPU"))
			continue
		}
		plan := DevicePlan{Index: gpu.Index, Model: m.Name, MigEnabled: chosen.MigEnabled != nil && *chosen.MigEnabled}
		if plan.MigEnabled {
			layout, err := layoutFromCounts(m, chosen.MigDevices)
			if err == nil {
				layout, err = Validate(m, layout)
			}
			if err != nil {
				problems.add(gpu.Index, m.Name, err)
				continue
			}
			plan.Layout = layout
		}
		plans = append(plans, plan)
	}
	return plans, problems.err()
}

// chooseEntry returns the last entry that selects the GPU by index and device-filter, nil when
// none does. A GPU with no PCI id to match filters against is matched with its model's ids.
func chooseEntry(entries []ConfigEntry, gpu GPUInfo, m *Model) *ConfigEntry {
	chosen := lastMatch(entries, gpu, gpu.PCIDeviceID)
	if chosen == nil && gpu.PCIDeviceID == 0 && m != nil {
		chosen = lastMatch(entries, gpu, m.PCIDeviceIDs...)
	}
	return chosen
}

func lastMatch(entries []ConfigEntry, gpu GPUInfo, pciDeviceIDs ...uint32) *ConfigEntry {
	var chosen *ConfigEntry
	for i := range entries {
		e := &entries[i]
		if !(e.Devices.All || slices.Contains(e.Devices.Indexes, gpu.Index)) {
			continue
		}
		for _, id := range pciDeviceIDs {
			if e.DeviceFilter.Matches(id, gpu.PCISubsystemID) {
				chosen = e
			}
		}
	}
	return chosen
}

// gpuErrors collects CheckConfig's errors, one per distinct (model, error) with every GPU it
// applies to, so that a configuration that is wrong for eight identical GPUs says so once.
type gpuErrors struct {
	config string
	list   []*gpuError
}

type gpuError struct {
	indexes []int
	model   string
	err     error
}

func (g *gpuErrors) add(index int, model string, err error) {
	for _, e := range g.list {
		if e.model == model && e.err.Error() == err.Error() {
			e.indexes = append(e.indexes, index)
			return
		}
	}
	g.list = append(g.list, &gpuError{indexes: []int{index}, model: model, err: err})
}

func (g *gpuErrors) err() error {
	errs := make([]error, 0, len(g.list))
	for _, e := range g.list {
		which := fmt.Sprintf("device %d", e.indexes[0])
		if len(e.indexes) > 1 {
			which = "devices " + indexRanges(e.indexes)
		}
		errs = append(errs, fmt.Errorf("mig config %q, %s (%s): %w", g.config, which, e.model, e.err))
	}
	return errors.Join(errs...)
}

// indexRanges writes ascending indexes as ranges: "0-3,5,7-8".
func indexRanges(idx []int) string {
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		} else {
			parts = append(parts, fmt.Sprint(idx[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// layoutFromCounts turns a mig-devices map into unplaced GPU instances, largest first.
func layoutFromCounts(m *Model, counts map[string]int) ([]Instance, error) {
	type want struct {
		gi    *GIProfile
		count int
	}
	var ws []want
	for _, name := range slices.Sorted(mapKeys(counts)) {
		c := counts[name]
		if c == 0 {
			continue
		}
		p, err := ParseProfile(name)
		if err != nil {
			return nil, fmt.Errorf("profile %q: %w", name, err)
		}
		gi, ok := m.Profile(name)
		if !ok {
			return nil, fmt.Errorf("profile %q is not a MIG profile of %s (profiles: %s)", name, m.Name, strings.Join(m.ProfileNames(), ", "))
		}
		n := c
		if p.IsComputeInstance() {
			per := 0
			for _, cp := range gi.ComputeProfiles {
				if cp.Slices == p.C {
					per = cp.InstanceCount
				}
			}
			if per == 0 {
				return nil, fmt.Errorf("profile %q: %s has no %d-slice compute instance profile", name, gi.Name, p.C)
			}
			n = (c + per - 1) / per
		}
		if n > gi.InstanceCount {
			// Refused before the instances are spelled out, as Validate would refuse them: a
			// count is any number in the file.
			return nil, &ValidationError{Model: m.Name, Kind: ConflictCount, Allowed: fmt.Sprintf("at most %d", gi.InstanceCount),
				msg: fmt.Sprintf("profile %q: %d instances of %s", name, n, gi.Name)}
		}
		ws = append(ws, want{gi, n})
	}
	slices.SortStableFunc(ws, func(a, b want) int { return cmp.Compare(b.gi.MemorySlices(), a.gi.MemorySlices()) })
	var out []Instance
	for _, w := range ws {
		for range w.count {
			out = append(out, Instance{Profile: w.gi.Name})
		}
	}
	return out, nil
}

// configName turns a profile name into mig-parted's config-name form ("+" becomes ".").
func configName(profile string) string { return "all-" + strings.ReplaceAll(profile, "+", ".") }

// balancedCounts is mig-parted's balanced formula: on 7 compute slices 2×1g + 1×2g + 1×3g, on 4
// compute slices 2×1g + 1×2g, using the plain profiles and the 1g with the most instances.
func balancedCounts(m *Model) map[string]int {
	out := map[string]int{}
	pick := func(enum int) string {
		if p, ok := m.ProfileByEnum(enum); ok {
			return p.Name
		}
		return ""
	}
	out[pick(enum1Slice)] = 2
	out[pick(enum2Slice)] = 1
	if m.ComputeSlices >= 7 {
		out[pick(enum3Slice)] = 1
	}
	delete(out, "")
	return out
}

// BuiltinConfigs returns the built-in named configurations for every catalog model, in mig-parted's
// format: "all-disabled", "all-enabled" (MIG on, no instances), "all-<profile>" for each GPU-instance
// profile of each model (with "+" written as ".", e.g. "all-1g.5gb.me"; the count is the profile's
// instance count) and "all-balanced". Model-specific entries carry a device-filter with the model's
// PCI ids, so a name shared by several models (all-1g.10gb) does the right thing on each. The
// result is freshly built on every call.
func BuiltinConfigs() *ConfigSpec {
	t, f := true, false
	spec := &ConfigSpec{Version: "v1", MigConfigs: map[string][]ConfigEntry{
		"all-disabled": {{Devices: DevicesAll(), MigEnabled: &f}},
		"all-enabled":  {{Devices: DevicesAll(), MigEnabled: &t, MigDevices: map[string]int{}}},
	}}
	for _, m := range catalog() {
		filter := make(DeviceFilter, len(m.PCIDeviceIDs))
		for i, id := range m.PCIDeviceIDs {
			filter[i] = fmt.Sprintf("0x%08X", id)
		}
		for _, p := range m.Profiles {
			n := configName(p.Name)
			spec.MigConfigs[n] = append(spec.MigConfigs[n], ConfigEntry{
				DeviceFilter: slices.Clone(filter), Devices: DevicesAll(), MigEnabled: &t,
				MigDevices: map[string]int{p.Name: p.InstanceCount},
			})
		}
		spec.MigConfigs["all-balanced"] = append(spec.MigConfigs["all-balanced"], ConfigEntry{
			DeviceFilter: slices.Clone(filter), Devices: DevicesAll(), MigEnabled: &t, MigDevices: balancedCounts(m),
		})
	}
	return spec
}

// NamedConfigLayout returns what the built-in configuration name gives a GPU of model m: whether
// MIG is enabled and the validated, placed layout. It fails when the name is unknown or has no entry
// for the model (e.g. "all-1g.5gb" on an H100).
func NamedConfigLayout(name string, m *Model) (migEnabled bool, layout []Instance, err error) {
	if m == nil {
		return false, nil, errNilModel("NamedConfigLayout")
	}
	gpu := GPUInfo{Index: 0, Model: m}
	if len(m.PCIDeviceIDs) > 0 {
		gpu.PCIDeviceID = m.PCIDeviceIDs[0]
	}
	plans, err := CheckConfig(BuiltinConfigs(), name, []GPUInfo{gpu})
	if err != nil {
		return false, nil, err
	}
	return plans[0].MigEnabled, plans[0].Layout, nil
}
