package standin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
)

// State is what the stand-in library serves: the machine and its MIG state. Its text form
// (Marshal, ParseState) is the one the library reads and writes; the format is described at
// the top of csrc/standin.c.
type State struct {
	// DriverVersion, NVMLVersion and CUDADriverVersion are the system-wide answers.
	DriverVersion, NVMLVersion string
	CUDADriverVersion          int
	// GPUs are the GPUs by index.
	GPUs []GPU
}

// GPU is one GPU of a State.
type GPU struct {
	// UUID and Name are GetUUID's and GetName's answers.
	UUID, Name string
	// Minor is the device node's minor number (GetMinorNumber).
	Minor int
	// Brand and Architecture are NVML's nvmlBrandType_t and nvmlDeviceArchitecture_t values.
	Brand, Architecture int
	// CCMajor and CCMinor are the CUDA compute capability.
	CCMajor, CCMinor int
	// MemoryBytes is GetMemoryInfo's total (all of it free).
	MemoryBytes uint64
	// NUMANode is GetNumaNodeId's answer; -1: NVML answers NOT_SUPPORTED.
	NUMANode int
	// Cores is GetNumGpuCores's answer; -1: NVML answers NOT_SUPPORTED.
	Cores int
	// PCIDeviceID and PCISubsystemID are GetPciInfo's ids.
	PCIDeviceID, PCISubsystemID uint32
	// BusID is the PCI address, "0000:07:00.0".
	BusID string
	// MIGCapable says whether MIG calls are supported at all.
	MIGCapable bool
	// MIGMode is the current (and pending) MIG mode, NVML's DEVICE_MIG_ENABLE or _DISABLE.
	MIGMode int
	// ComputeMode is the GPU's nvmlComputeMode_t.
	ComputeMode int
	// Generation counts the compute instances created; it names new MIG devices.
	Generation uint64
	// SupportedEvents is GetSupportedEventTypes's answer.
	SupportedEvents uint64
	// GIProfiles are the GPU-instance profiles the GPU supports.
	GIProfiles []GIProfile
	// CIProfiles are the compute-instance profiles inside each GPU-instance profile.
	CIProfiles []CIProfile
	// GPUInstances are the GPU instances that exist.
	GPUInstances []GPUInstance
	// ComputeInstances are the compute instances (MIG devices) that exist.
	ComputeInstances []ComputeInstance
}

// GIProfile is a GPU-instance profile as GetGpuInstanceProfileInfo reports it for Enum.
type GIProfile struct {
	// Enum is the GPU_INSTANCE_PROFILE_* value, ID NVML's profile Id.
	Enum, ID int
	// Slices is the compute slice count, Instances how many instances fit.
	Slices, Instances int
	// Multiprocessors is the SM count.
	Multiprocessors int
	// CopyEngines, Decoders, Encoders, Jpegs and Ofas are the engine counts.
	CopyEngines, Decoders, Encoders, Jpegs, Ofas int
	// MemoryMiB is the instance's memory.
	MemoryMiB uint64
	// Placements are the possible placements, in memory slices.
	Placements []mig.Placement
	// Name is the profile's name ("1g.5gb"); MIG device names and media-engine rules use it.
	Name string
}

// CIProfile is a compute-instance profile inside GPU instances of GI profile Id GIProfileID.
type CIProfile struct {
	// GIProfileID is the Id of the GPU-instance profile this profile belongs to.
	GIProfileID int
	// Enum is the COMPUTE_INSTANCE_PROFILE_* value, ID NVML's profile Id.
	Enum, ID int
	// Slices is the compute slice count, Instances how many fit in one GPU instance.
	Slices, Instances int
	// Multiprocessors is the SM count.
	Multiprocessors int
	// Starts are the possible first compute slices.
	Starts []int
}

// GPUInstance is an existing GPU instance.
type GPUInstance struct {
	// ID is the GPU instance id, ProfileID its GPU-instance profile Id.
	ID, ProfileID int
	// Start and Size are its placement, in memory slices.
	Start, Size int
}

// ComputeInstance is an existing compute instance (a MIG device) of GPU instance GIID.
type ComputeInstance struct {
	// GIID is its GPU instance's id, ID its own id, ProfileID its compute-instance profile Id.
	GIID, ID, ProfileID int
	// Start is its first compute slice.
	Start int
	// ComputeMode is the MIG device's nvmlComputeMode_t.
	ComputeMode int
	// UUID is the MIG device's UUID ("MIG-...").
	UUID string
}

// FromMachine describes a gputest machine as it is now: its GPUs as NVML reports them through
// the machine's nvml.Interface, the MIG geometry of each (Machine.MIGModel: GPU-instance
// profiles, compute-instance profiles and their placements) and its existing instances.
func FromMachine(m *gputest.Machine) (*State, error) {
	s := &State{}
	var ret nvml.Return
	if s.DriverVersion, ret = m.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("standin: SystemGetDriverVersion: %w", ret)
	}
	if s.NVMLVersion, ret = m.SystemGetNVMLVersion(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("standin: SystemGetNVMLVersion: %w", ret)
	}
	if s.CUDADriverVersion, ret = m.SystemGetCudaDriverVersion(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("standin: SystemGetCudaDriverVersion: %w", ret)
	}
	for i := range m.NumGPUs() {
		g, err := gpuFromMachine(m, i)
		if err != nil {
			return nil, fmt.Errorf("standin: GPU %d of %s: %w", i, m.Name(), err)
		}
		s.GPUs = append(s.GPUs, g)
	}
	return s, nil
}

// gpuFromMachine reads GPU i's identity and attributes through NVML and its MIG state.
func gpuFromMachine(m *gputest.Machine, i int) (GPU, error) {
	d := m.Device(i)
	g := GPU{NUMANode: -1, Cores: -1}
	var ret nvml.Return
	var brand nvml.BrandType
	var arch nvml.DeviceArchitecture
	var mem nvml.Memory
	var pci nvml.PciInfo
	steps := []struct {
		op   string
		call func() nvml.Return
	}{
		{"GetUUID", func() nvml.Return { g.UUID, ret = d.GetUUID(); return ret }},
		{"GetName", func() nvml.Return { g.Name, ret = d.GetName(); return ret }},
		{"GetMinorNumber", func() nvml.Return { g.Minor, ret = d.GetMinorNumber(); return ret }},
		{"GetBrand", func() nvml.Return { brand, ret = d.GetBrand(); return ret }},
		{"GetArchitecture", func() nvml.Return { arch, ret = d.GetArchitecture(); return ret }},
		{"GetCudaComputeCapability", func() nvml.Return { g.CCMajor, g.CCMinor, ret = d.GetCudaComputeCapability(); return ret }},
		{"GetMemoryInfo", func() nvml.Return { mem, ret = d.GetMemoryInfo(); return ret }},
		{"GetPciInfo", func() nvml.Return { pci, ret = d.GetPciInfo(); return ret }},
	}
	for _, s := range steps {
		if r := s.call(); r != nvml.SUCCESS {
			return g, fmt.Errorf("%s: %w", s.op, r)
		}
	}
	g.Brand, g.Architecture, g.MemoryBytes = int(brand), int(arch), mem.Total
	g.PCIDeviceID, g.PCISubsystemID = pci.PciDeviceId, pci.PciSubSystemId
	g.BusID = cString(pci.BusId[:])
	if n, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
		g.NUMANode = n
	}
	if c, ret := d.GetNumGpuCores(); ret == nvml.SUCCESS {
		g.Cores = c
	}
	if ev, ret := d.GetSupportedEventTypes(); ret == nvml.SUCCESS {
		g.SupportedEvents = ev
	}
	if cm, ret := d.GetComputeMode(); ret == nvml.SUCCESS {
		g.ComputeMode = int(cm)
	}
	mode, _, ret := d.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		g.MIGCapable, g.MIGMode = true, mode
	case nvml.ERROR_NOT_SUPPORTED:
		return g, nil
	default:
		return g, fmt.Errorf("GetMigMode: %w", ret)
	}
	if model := m.MIGModel(i); model != nil {
		g.GIProfiles, g.CIProfiles = profiles(model)
	}
	g.GPUInstances, g.ComputeInstances = instances(m.GPUInstances(i))
	return g, nil
}

// profiles turns a MIG model into the profile records; a compute profile without placements
// may start at every multiple of its size, as gputest places it.
func profiles(model *mig.Model) ([]GIProfile, []CIProfile) {
	var gis []GIProfile
	var cis []CIProfile
	for _, p := range model.Profiles {
		gis = append(gis, GIProfile{
			Enum: p.Enum, ID: p.ID, Slices: p.ComputeSlices, Instances: p.InstanceCount,
			Multiprocessors: p.Multiprocessors, CopyEngines: p.CopyEngines, Decoders: p.Decoders,
			Encoders: p.Encoders, Jpegs: p.JpegEngines, Ofas: p.OfaEngines, MemoryMiB: p.MemoryMiB,
			Placements: p.Placements, Name: p.Name,
		})
		for _, c := range p.ComputeProfiles {
			starts := c.Placements
			if len(starts) == 0 {
				for st := 0; c.Slices > 0 && st+c.Slices <= p.ComputeSlices; st += c.Slices {
					starts = append(starts, st)
				}
			}
			cis = append(cis, CIProfile{GIProfileID: p.ID, Enum: c.Enum, ID: c.ID, Slices: c.Slices,
				Instances: c.InstanceCount, Multiprocessors: c.Multiprocessors, Starts: starts})
		}
	}
	return gis, cis
}

func instances(states []gputest.GPUInstanceState) ([]GPUInstance, []ComputeInstance) {
	var gis []GPUInstance
	var cis []ComputeInstance
	for _, gi := range states {
		gis = append(gis, GPUInstance{ID: gi.ID, ProfileID: gi.ProfileID, Start: gi.Placement.Start, Size: gi.Placement.Size})
		for _, ci := range gi.ComputeInstances {
			cis = append(cis, ComputeInstance{GIID: gi.ID, ID: ci.ID, ProfileID: ci.ProfileID, Start: ci.Start, UUID: ci.UUID})
		}
	}
	return gis, cis
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// Install writes the state into dir/StateName (dir being the library's directory), through a
// temporary file and a rename as the library itself writes it.
func (s *State) Install(dir string) error {
	data, err := s.Marshal()
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, StateName+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("standin: write state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, StateName)); err != nil {
		return fmt.Errorf("standin: write state: %w", err)
	}
	return nil
}

// ReadState reads the state the library in dir serves now.
func ReadState(dir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, StateName))
	if err != nil {
		return nil, fmt.Errorf("standin: %w", err)
	}
	s, err := ParseState(data)
	if err != nil {
		return nil, fmt.Errorf("standin: %s: %w", filepath.Join(dir, StateName), err)
	}
	return s, nil
}

// Marshal returns the state's text form. Names and UUIDs must not contain line breaks, and
// UUIDs and bus IDs no spaces.
func (s *State) Marshal() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# nvml-standin state\ndriver %s\nnvml %s\ncuda %d\n", s.DriverVersion, s.NVMLVersion, s.CUDADriverVersion)
	for i, g := range s.GPUs {
		if strings.ContainsAny(g.UUID+g.BusID, " \n") || strings.Contains(g.Name, "\n") {
			return nil, fmt.Errorf("standin: GPU %d: UUID %q, bus ID %q or name %q cannot be written", i, g.UUID, g.BusID, g.Name)
		}
		fmt.Fprintf(&b, "gpu %d %d %d %d %d %d %d %d %d 0x%08x 0x%08x %s %d %d %d %d %s %s\n", i, g.Minor, g.Brand,
			g.Architecture, g.CCMajor, g.CCMinor, g.MemoryBytes, g.NUMANode, g.Cores, g.PCIDeviceID, g.PCISubsystemID,
			g.BusID, b2i(g.MIGCapable), g.MIGMode, g.ComputeMode, g.Generation, g.UUID, g.Name)
		fmt.Fprintf(&b, "events %d %d\n", i, g.SupportedEvents)
		for _, p := range g.GIProfiles {
			fmt.Fprintf(&b, "giprof %d %d %d %d %d %d %d %d %d %d %d %d %s %s\n", i, p.Enum, p.ID, p.Slices, p.Instances,
				p.Multiprocessors, p.CopyEngines, p.Decoders, p.Encoders, p.Jpegs, p.Ofas, p.MemoryMiB, placements(p.Placements), p.Name)
		}
		for _, p := range g.CIProfiles {
			fmt.Fprintf(&b, "ciprof %d %d %d %d %d %d %d %s\n", i, p.GIProfileID, p.Enum, p.ID, p.Slices, p.Instances,
				p.Multiprocessors, ints(p.Starts))
		}
		for _, gi := range g.GPUInstances {
			fmt.Fprintf(&b, "gi %d %d %d %d %d\n", i, gi.ID, gi.ProfileID, gi.Start, gi.Size)
		}
		for _, ci := range g.ComputeInstances {
			fmt.Fprintf(&b, "ci %d %d %d %d %d %d %s\n", i, ci.GIID, ci.ID, ci.ProfileID, ci.Start, ci.ComputeMode, ci.UUID)
		}
	}
	return b.Bytes(), nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func placements(ps []mig.Placement) string {
	if len(ps) == 0 {
		return "-"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d:%d", p.Start, p.Size)
	}
	return strings.Join(parts, ",")
}

func ints(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

// ParseState parses the text form. It reads back what Marshal and the library write; the
// instance records are all it needs to follow MIG changes.
func ParseState(data []byte) (*State, error) {
	s := &State{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		if err := s.parseLine(sc.Text()); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	return s, sc.Err()
}

func (s *State) parseLine(line string) error {
	f := strings.Fields(line)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return nil
	}
	switch f[0] {
	case "driver", "nvml", "cuda":
		return s.parseSystem(f)
	case "gpu":
		return s.parseGPU(line, f)
	}
	if len(f) < 2 {
		return fmt.Errorf("short record %q", line)
	}
	gi, err := strconv.Atoi(f[1])
	if err != nil || gi < 0 || gi >= len(s.GPUs) {
		return fmt.Errorf("record %q names an unknown GPU", line)
	}
	g := &s.GPUs[gi]
	switch f[0] {
	case "giprof":
		return g.parseGIProfile(f)
	case "ciprof":
		return g.parseCIProfile(f)
	case "gi":
		v, err := atois(f[2:], 4)
		if err != nil {
			return err
		}
		g.GPUInstances = append(g.GPUInstances, GPUInstance{ID: v[0], ProfileID: v[1], Start: v[2], Size: v[3]})
		return nil
	case "events":
		if len(f) != 3 {
			return fmt.Errorf("events record %q: want 3 fields", line)
		}
		ev, err := strconv.ParseUint(f[2], 10, 64)
		g.SupportedEvents = ev
		return err
	case "ci":
		if len(f) != 8 {
			return fmt.Errorf("ci record %q: want 8 fields", line)
		}
		v, err := atois(f[2:7], 5)
		if err != nil {
			return err
		}
		g.ComputeInstances = append(g.ComputeInstances, ComputeInstance{GIID: v[0], ID: v[1], ProfileID: v[2], Start: v[3], ComputeMode: v[4], UUID: f[7]})
		return nil
	}
	return fmt.Errorf("unknown record %q", f[0])
}

func (s *State) parseSystem(f []string) error {
	if len(f) != 2 {
		return fmt.Errorf("%s record: want one value", f[0])
	}
	switch f[0] {
	case "driver":
		s.DriverVersion = f[1]
	case "nvml":
		s.NVMLVersion = f[1]
	default:
		v, err := strconv.Atoi(f[1])
		if err != nil {
			return fmt.Errorf("cuda record: %w", err)
		}
		s.CUDADriverVersion = v
	}
	return nil
}

func (s *State) parseGPU(line string, f []string) error {
	if len(f) < 19 {
		return fmt.Errorf("gpu record %q: want at least 19 fields", line)
	}
	v, err := atois(f[1:10], 9)
	if err != nil {
		return err
	}
	if v[0] != len(s.GPUs) {
		return fmt.Errorf("gpu record %q: index %d out of order", line, v[0])
	}
	dev, err1 := strconv.ParseUint(f[10], 0, 32)
	sub, err2 := strconv.ParseUint(f[11], 0, 32)
	w, err3 := atois(f[13:16], 3)
	gen, err4 := strconv.ParseUint(f[16], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return fmt.Errorf("gpu record %q: %w", line, err)
	}
	name := strings.Join(f[18:], " ")
	s.GPUs = append(s.GPUs, GPU{Minor: v[1], Brand: v[2], Architecture: v[3], CCMajor: v[4], CCMinor: v[5],
		MemoryBytes: uint64(v[6]), NUMANode: v[7], Cores: v[8], PCIDeviceID: uint32(dev), PCISubsystemID: uint32(sub),
		BusID: f[12], MIGCapable: w[0] == 1, MIGMode: w[1], ComputeMode: w[2], Generation: gen, UUID: f[17], Name: name})
	return nil
}

func (g *GPU) parseGIProfile(f []string) error {
	if len(f) < 14 {
		return fmt.Errorf("giprof record: want at least 14 fields")
	}
	v, err := atois(f[2:13], 11)
	if err != nil {
		return err
	}
	p := GIProfile{Enum: v[0], ID: v[1], Slices: v[2], Instances: v[3], Multiprocessors: v[4], CopyEngines: v[5],
		Decoders: v[6], Encoders: v[7], Jpegs: v[8], Ofas: v[9], MemoryMiB: uint64(v[10]), Name: strings.Join(f[14:], " ")}
	if f[13] != "-" {
		for _, pl := range strings.Split(f[13], ",") {
			var x mig.Placement
			if _, err := fmt.Sscanf(pl, "%d:%d", &x.Start, &x.Size); err != nil {
				return fmt.Errorf("giprof placement %q: %w", pl, err)
			}
			p.Placements = append(p.Placements, x)
		}
	}
	g.GIProfiles = append(g.GIProfiles, p)
	return nil
}

func (g *GPU) parseCIProfile(f []string) error {
	if len(f) != 9 {
		return fmt.Errorf("ciprof record: want 9 fields")
	}
	v, err := atois(f[2:8], 6)
	if err != nil {
		return err
	}
	p := CIProfile{GIProfileID: v[0], Enum: v[1], ID: v[2], Slices: v[3], Instances: v[4], Multiprocessors: v[5]}
	if f[8] != "-" {
		if p.Starts, err = atois(strings.Split(f[8], ","), -1); err != nil {
			return err
		}
	}
	g.CIProfiles = append(g.CIProfiles, p)
	return nil
}

// atois parses want integers (any number with want < 0).
func atois(fs []string, want int) ([]int, error) {
	if want >= 0 && len(fs) != want {
		return nil, fmt.Errorf("want %d numbers, got %d", want, len(fs))
	}
	out := make([]int, len(fs))
	for i, s := range fs {
		v, err := strconv.Atoi(s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
