package nvmlgpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/internal/nvmlpci"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// Option configures Enumerate.
type Option func(*enumConfig)

type enumConfig struct {
	skipFailed   bool
	lookup       func(productName string) (*mig.Model, error)
	skipGeometry bool
}

// SkipFailedGPUs decides what Enumerate does when one GPU fails: with skip true the GPU is left
// out and its *gpu.DeviceError recorded in Inventory.Errors; with skip false (the default)
// Enumerate returns that error and no inventory.
func SkipFailedGPUs(skip bool) Option {
	return func(c *enumConfig) { c.skipFailed = skip }
}

// WithCatalog replaces the MIG catalog lookup (mig.Lookup) used to name MIG profiles and to fill
// in SM counts NVML cannot report.
func WithCatalog(lookup func(productName string) (*mig.Model, error)) Option {
	return func(c *enumConfig) { c.lookup = lookup }
}

// ReadMIGGeometry decides whether Enumerate reads each MIG-capable product's MIG geometry from
// the device (GPU.MIGGeometry; the default) — about two NVML calls per profile, once per
// product.
func ReadMIGGeometry(read bool) Option {
	return func(c *enumConfig) { c.skipGeometry = !read }
}

// Enumerate reads every GPU and existing MIG device through lib into plain Go values. lib must
// already be initialized (see Open); Enumerate neither initializes nor shuts it down. The
// context is checked between GPUs.
func Enumerate(ctx context.Context, lib nvml.Interface, opts ...Option) (*gpu.Inventory, error) {
	if lib == nil {
		return nil, errors.New("gpu: Enumerate: nil nvml.Interface (use Open or OpenReal)")
	}
	c := enumConfig{lookup: mig.Lookup}
	for _, o := range opts {
		o(&c)
	}
	e := enumerator{lib: lib, cfg: c, models: map[string]*modelInfo{}}
	return e.run(ctx)
}

// Enumerate is Enumerate on the session's library.
func (s *Session) Enumerate(ctx context.Context, opts ...Option) (*gpu.Inventory, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("gpu: Enumerate on a closed NVML session")
	}
	return Enumerate(ctx, s.lib, opts...)
}

type enumerator struct {
	lib    nvml.Interface
	cfg    enumConfig
	models map[string]*modelInfo // by product name, built on first use
}

// modelInfo caches what the catalog and the device say about one product.
type modelInfo struct {
	catalog  *mig.Model       // nil if the catalog does not know the product
	geometry *gpu.MIGGeometry // read from the first MIG-capable GPU of the product
}

func (e *enumerator) run(ctx context.Context) (*gpu.Inventory, error) {
	inv := &gpu.Inventory{}
	v, ret := e.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: SystemGetDriverVersion: %w", ret)
	}
	dv, err := gpu.NormalizeDriverVersion(v)
	if err != nil {
		return nil, fmt.Errorf("gpu: SystemGetDriverVersion: %w", err)
	}
	inv.DriverVersion = dv
	cv, ret := e.lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: SystemGetCudaDriverVersion: %w", ret)
	}
	if inv.CUDADriverVersion, err = gpu.CUDADriverVersion(cv); err != nil {
		return nil, fmt.Errorf("gpu: SystemGetCudaDriverVersion: %w", err)
	}
	n, ret := e.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: DeviceGetCount: %w", ret)
	}
	inv.GPUs = make([]gpu.GPU, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("gpu: enumeration stopped before GPU %d: %w", i, err)
		}
		g, derr := e.gpu(i)
		if derr != nil {
			if !e.cfg.skipFailed {
				return nil, fmt.Errorf("gpu: enumeration failed (use SkipFailedGPUs(true) to skip failed GPUs): %w", derr)
			}
			inv.Errors = append(inv.Errors, derr)
			continue
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	dropSharedBusIDs(inv.GPUs)
	return inv, nil
}

// dropSharedBusIDs clears the PCI bus ID of GPUs that report the same one: an address that
// names two GPUs names neither, and resource.kubernetes.io/pciBusID must identify one device.
func dropSharedBusIDs(gpus []gpu.GPU) {
	count := map[string]int{}
	for _, g := range gpus {
		count[g.PCIBusID]++
	}
	for i := range gpus {
		if count[gpus[i].PCIBusID] > 1 {
			gpus[i].PCIBusID = ""
		}
	}
}

// gpu enumerates GPU i. What each NVML call's failure means is decided per call
// (docs/hardware.md): a call for identity the GPU cannot be served without fails the GPU; a
// call for an optional attribute that answers NOT_SUPPORTED (or FUNCTION_NOT_FOUND, an older
// driver) leaves the attribute out; any other error fails the GPU.
func (e *enumerator) gpu(i int) (gpu.GPU, *gpu.DeviceError) {
	g := gpu.GPU{Index: i, NUMANode: -1}
	fail := func(op string, ret nvml.Return) (gpu.GPU, *gpu.DeviceError) {
		return gpu.GPU{}, newDeviceError(i, -1, g.UUID, op, ret)
	}
	d, ret := e.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return fail("DeviceGetHandleByIndex", ret)
	}
	major, minor, op, ret := identity(d, &g)
	if ret == nvml.SUCCESS {
		op, ret = attributes(d, &g)
	}
	if ret != nvml.SUCCESS {
		return fail(op, ret)
	}
	model := e.model(g.ProductName)
	switch cores, ret := d.GetNumGpuCores(); {
	case ret == nvml.SUCCESS && cores > 0:
		g.Multiprocessors = cores / coresPerSM(major, minor)
	case ret == nvml.SUCCESS || unsupported(ret):
		if model.catalog != nil {
			g.Multiprocessors = model.catalog.Multiprocessors
		}
	default:
		return fail("GetNumGpuCores", ret)
	}
	// MIG. Compute capability 8.0 is necessary, not sufficient: A10G and L4 answer NOT_SUPPORTED.
	if major < 8 {
		return g, nil
	}
	if derr := e.migState(d, &g, model); derr != nil {
		return gpu.GPU{}, derr
	}
	return g, nil
}

// unsupported says whether an NVML call is not supported by this GPU or driver.
func unsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// identity reads what a GPU cannot be served without: UUID, minor number (its device node),
// product name (its MIG model) and compute capability. It returns the failed call, if any.
func identity(d nvml.Device, g *gpu.GPU) (major, minor int, op string, ret nvml.Return) {
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return 0, 0, "GetUUID", ret
	}
	if g.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
		return 0, 0, "GetMinorNumber", ret
	}
	if g.ProductName, ret = d.GetName(); ret != nvml.SUCCESS {
		return 0, 0, "GetName", ret
	}
	if major, minor, ret = d.GetCudaComputeCapability(); ret != nvml.SUCCESS {
		return 0, 0, "GetCudaComputeCapability", ret
	}
	g.CudaComputeCapability = fmt.Sprintf("%d.%d.0", major, minor)
	return major, minor, "", nvml.SUCCESS
}

// attributes reads the optional attributes: brand, architecture, memory, PCI address and NUMA
// node. One the GPU does not support is left out; another error is returned with its call.
func attributes(d nvml.Device, g *gpu.GPU) (string, nvml.Return) {
	brand, ret := d.GetBrand()
	if ret == nvml.SUCCESS {
		g.Brand = BrandName(brand)
	} else if !unsupported(ret) {
		return "GetBrand", ret
	}
	arch, ret := d.GetArchitecture()
	if ret == nvml.SUCCESS {
		g.Architecture = nvmlmig.ArchitectureName(arch)
	} else if !unsupported(ret) {
		return "GetArchitecture", ret
	}
	mem, ret := d.GetMemoryInfo()
	if ret == nvml.SUCCESS {
		g.MemoryBytes = mem.Total
	} else if !unsupported(ret) { // unified-memory systems have no dedicated memory
		return "GetMemoryInfo", ret
	}
	pci, ret := d.GetPciInfo()
	if ret == nvml.SUCCESS {
		g.PCIDeviceID, g.PCIBusID = pci.PciDeviceId, nvmlpci.BusID(pci)
	} else if !unsupported(ret) {
		return "GetPciInfo", ret
	}
	numa, ret := d.GetNumaNodeId()
	if ret == nvml.SUCCESS {
		g.NUMANode = numa
	} else if !unsupported(ret) {
		return "GetNumaNodeId", ret
	}
	return "", nvml.SUCCESS
}

// migState reads the MIG mode of a GPU of compute capability 8.0 or more, its geometry and its MIG
// devices. A GPU that does not support MIG is served whole; one whose MIG mode cannot be read
// fails (it may be in MIG mode, where the whole GPU cannot be used).
func (e *enumerator) migState(d nvml.Device, g *gpu.GPU, model *modelInfo) *gpu.DeviceError {
	cur, pending, ret := d.GetMigMode()
	switch {
	case unsupported(ret):
		return nil
	case ret != nvml.SUCCESS:
		return newDeviceError(g.Index, -1, g.UUID, "GetMigMode", ret)
	}
	g.MIGCapable = true
	if !e.cfg.skipGeometry {
		g.MIGGeometry = model.readGeometry(d)
	}
	g.MIGEnabled = cur == nvml.DEVICE_MIG_ENABLE
	g.MIGPending = pending == nvml.DEVICE_MIG_ENABLE
	if !g.MIGEnabled {
		return nil
	}
	return e.migDevices(d, g, model)
}

// model returns the cached catalog facts for a product.
func (e *enumerator) model(product string) *modelInfo {
	if mi, ok := e.models[product]; ok {
		return mi
	}
	mi := &modelInfo{}
	if e.cfg.lookup != nil {
		if m, err := e.cfg.lookup(product); err == nil {
			mi.catalog = m
		}
	}
	e.models[product] = mi
	return mi
}

// readGeometry reads the product's MIG geometry from d the first time it is asked.
func (mi *modelInfo) readGeometry(d nvml.Device) *gpu.MIGGeometry {
	if mi.geometry == nil {
		m, diffs, err := nvmlmig.DeviceModel(d)
		mi.geometry = &gpu.MIGGeometry{Model: m, CatalogDifferences: diffs, Err: err}
	}
	return mi.geometry
}

func (e *enumerator) migDevices(d nvml.Device, g *gpu.GPU, mi *modelInfo) *gpu.DeviceError {
	states, err := nvmlmig.ListEnabledInstances(d) // migState read the mode as enabled
	if err != nil {
		var we *nvmlmig.WalkError
		if errors.As(err, &we) {
			return newDeviceError(g.Index, we.MIGIndex, g.UUID, we.Op, we.Return)
		}
		return newDeviceError(g.Index, -1, g.UUID, "ListInstances", nvml.ERROR_UNKNOWN)
	}
	names := mi.giProfileNames(states, g.MemoryBytes>>20)
	for _, gi := range states {
		for _, ci := range gi.ComputeInstances {
			if ci.UUID == "" {
				// NVML lists no MIG device handles: the GPU is in MIG mode with devices that
				// cannot be named to a container, so it is not served at all.
				return newDeviceError(g.Index, -1, g.UUID, "GetMaxMigDeviceCount", nvml.ERROR_NOT_SUPPORTED)
			}
			g.MIGDevices = append(g.MIGDevices, gpu.MIGDevice{
				ParentUUID: g.UUID, ParentIndex: g.Index, ParentMinor: g.Minor,
				UUID: ci.UUID, GIID: gi.ID, CIID: ci.ID,
				GIProfileID: int(gi.Profile.Id), CIProfileID: int(ci.Profile.Id),
				Placement:       gi.Placement,
				MemoryBytes:     gi.Profile.MemorySizeMB << 20,
				Multiprocessors: int(ci.Profile.MultiprocessorCount),
				CopyEngines:     int(gi.Profile.CopyEngineCount),
				Decoders:        int(gi.Profile.DecoderCount),
				Encoders:        int(gi.Profile.EncoderCount),
				JpegEngines:     int(gi.Profile.JpegCount),
				OfaEngines:      int(gi.Profile.OfaCount),
				Profile:         computeInstanceName(names[gi.Profile.Id], gi.Profile, ci.Profile),
			})
		}
	}
	slices.SortFunc(g.MIGDevices, func(a, b gpu.MIGDevice) int {
		return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.GIID, b.GIID), cmp.Compare(a.CIID, b.CIID))
	})
	return nil
}

// giProfileNames names the GPU-instance profiles of existing instances, by NVML profile Id, from
// the device's own geometry: the name the MIG model gives the same Id (the geometry read from the
// device, which the dynamic path publishes, else the catalog) when that profile has the
// instance's slice count and, within 1 GiB, its memory; otherwise mig.ProfileName of the live
// profile info, with collisions told apart as mig.DisambiguateProfileNames does. A catalog entry
// whose Id means another profile on this driver never names an instance.
func (mi *modelInfo) giProfileNames(states []nvmlmig.GPUInstanceState, gpuMiB uint64) map[uint32]string {
	var derived []mig.GIProfile
	names := map[uint32]string{}
	for _, gi := range states {
		gp := gi.Profile
		if _, done := names[gp.Id]; done {
			continue
		}
		if name, ok := mi.knownName(gp); ok {
			names[gp.Id] = name
			continue
		}
		names[gp.Id] = ""
		derived = append(derived, mig.GIProfile{ID: int(gp.Id), Name: mig.ProfileName(gi.ProfileEnum, int(gp.SliceCount), gp.MemorySizeMB, gpuMiB)})
	}
	mig.DisambiguateProfileNames(derived)
	for _, p := range derived {
		names[uint32(p.ID)] = p.Name
	}
	return names
}

// knownName is the name a MIG model gives the profile Id, when that profile matches the live
// profile info.
func (mi *modelInfo) knownName(gp nvml.GpuInstanceProfileInfo) (string, bool) {
	models := []*mig.Model{mi.catalog}
	if mi.geometry != nil && mi.geometry.Model != nil {
		models = []*mig.Model{mi.geometry.Model, mi.catalog}
	}
	for _, m := range models {
		if m == nil {
			continue
		}
		p, ok := m.ProfileByID(int(gp.Id))
		if ok && p.ComputeSlices == int(gp.SliceCount) && absDiff(p.MemoryMiB, gp.MemorySizeMB) < 1024 {
			return p.Name, true
		}
	}
	return "", false
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// computeInstanceName is the name of a MIG device: its GPU instance's profile name, with a
// "<c>c." prefix when the compute instance is smaller than its GPU instance.
func computeInstanceName(giName string, gp nvml.GpuInstanceProfileInfo, cp nvml.ComputeInstanceProfileInfo) string {
	if cp.SliceCount != 0 && cp.SliceCount < gp.SliceCount {
		return strconv.Itoa(int(cp.SliceCount)) + "c." + giName
	}
	return giName
}

// coresPerSM is the number of CUDA cores in one SM for a compute capability; NVML reports cores,
// not SMs, for a whole GPU.
func coresPerSM(major, minor int) int {
	switch {
	case major == 8 && minor == 0, major == 7, major == 6 && minor == 0:
		return 64
	case major <= 3:
		return 192
	default:
		return 128
	}
}

// newDeviceError is GPU index (MIG device migIndex, -1 for the GPU itself) failing in NVML call op.
func newDeviceError(index, migIndex int, uuid, op string, ret nvml.Return) *gpu.DeviceError {
	e := &gpu.DeviceError{Index: index, UUID: uuid, MIGIndex: migIndex, Op: op, Return: ret}
	e.Message = e.Error()
	return e
}
