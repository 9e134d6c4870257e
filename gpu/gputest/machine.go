package gputest

import (
	"fmt"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/uuid"

	"github.com/gpudra/gpudra/mig"
)

// Machine is a fake NVML library for one machine. It implements nvml.Interface on go-nvml's
// mock.Interface: its func fields are set to behave like the hardware, and a test may replace
// any of them after New to change one method. Every method that nvml.Interface, nvml.Device,
// nvml.GpuInstance, nvml.ComputeInstance or nvml.EventSet has and the fake does not model
// answers ERROR_NOT_SUPPORTED instead of panicking.
//
// A Machine is safe for concurrent use. Init and Shutdown are counted but not required: calls
// made before Init succeed, so tests may skip the NVML lifecycle.
type Machine struct {
	mock.Interface

	spec machineSpec

	mu            sync.Mutex
	driverVersion string
	cudaVersion   int
	devices       []*Device
	calls         map[string]int
	faults        []*fault
	eventSets     []*EventSet
	initCount     int
	stateDir      string // WithStateDir, "" when none
	callHook      func(call string)
}

var _ nvml.Interface = (*Machine)(nil)

// Option configures a Machine at construction.
type Option func(*config) error

type config struct {
	driverVersion string
	cudaVersion   int
	faults        []*fault
	mig           map[int][]string // GPU index → layout
	migAll        []string         // layout for every MIG-capable GPU, nil if none
	migSpec       *mig.ConfigSpec  // mig-parted configuration, nil if none
	migSpecName   string           // the configuration's name in migSpec
	migSpecSource string           // where migSpec came from, for errors
	stateDir      string
	callHook      func(call string)
	profileEdits  []profileEdit  // WithMIGProfileEdit, in order
	bridges       *[][2]int      // WithNVLinkBridges, nil when not given
	fabricAll     *Fabric        // WithFabric, nil when not given
	fabric        map[int]Fabric // WithGPUFabric, by GPU index
}

// WithDriverVersion sets the driver version SystemGetDriverVersion reports (default
// DefaultDriverVersion).
func WithDriverVersion(v string) Option {
	return func(c *config) error {
		if v == "" {
			return fmt.Errorf("gputest: WithDriverVersion: empty version")
		}
		c.driverVersion = v
		return nil
	}
}

// WithCUDADriverVersion sets the CUDA driver version SystemGetCudaDriverVersion reports, in
// NVML's encoding 1000*major + 10*minor (default DefaultCUDADriverVersion, 13000).
func WithCUDADriverVersion(v int) Option {
	return func(c *config) error {
		if v <= 0 {
			return fmt.Errorf("gputest: WithCUDADriverVersion: %d is not a positive CUDA version (want e.g. 12040)", v)
		}
		c.cudaVersion = v
		return nil
	}
}

// WithFault makes the nth call (1-based, counted from New) of method fail with ret. The method
// is named as in nvml.Interface or nvml.Device ("CreateGpuInstanceWithPlacement", "GetUUID",
// "DeviceGetHandleByIndex"); calls are counted across the whole machine. Methods of GPU
// instances, compute instances, MIG device handles and event sets may be qualified to tell
// them apart: "GpuInstance.Destroy", "ComputeInstance.Destroy", "MIGDeviceHandle.GetUUID",
// "Device.GetUUID", "EventSet.Wait", "Interface.Init". An unqualified name counts the calls
// of every kind.
func WithFault(method string, n int, ret nvml.Return) Option {
	return func(c *config) error {
		f, err := newFault(method, n, ret, false)
		if err != nil {
			return err
		}
		c.faults = append(c.faults, f)
		return nil
	}
}

// WithFaultAfter makes every call of method after the nth (counted from New) fail with ret.
// n = 0 fails every call.
func WithFaultAfter(method string, n int, ret nvml.Return) Option {
	return func(c *config) error {
		f, err := newFault(method, n, ret, true)
		if err != nil {
			return err
		}
		c.faults = append(c.faults, f)
		return nil
	}
}

// WithNVLinkBridges rewires the NVLink bridges of a machine whose GPUs are paired by bridges
// (a30x4): each pair names the GPU indexes one bridge joins; no pairs removes every bridge. It is
// an error on other machines, for an index out of range, and for a GPU in two pairs.
func WithNVLinkBridges(pairs ...[2]int) Option {
	return func(c *config) error {
		c.bridges = &pairs
		return nil
	}
}

// applyBridges checks pairs against the machine and puts them into its spec.
func applyBridges(spec *machineSpec, pairs [][2]int) error {
	if spec.nvlink != nvlinkBridge {
		return fmt.Errorf("gputest: WithNVLinkBridges: the GPUs of %s are not joined by NVLink bridges", spec.name)
	}
	used := map[int]bool{}
	for k, p := range pairs {
		for _, i := range p {
			if i < 0 || i >= len(spec.slots) {
				return fmt.Errorf("gputest: WithNVLinkBridges: pair %d: GPU %d is not a GPU of %s (0..%d)", k, i, spec.name, len(spec.slots)-1)
			}
			if used[i] {
				return fmt.Errorf("gputest: WithNVLinkBridges: pair %d: GPU %d is already bridged (a bridge joins two GPUs, each GPU takes one)", k, i)
			}
			used[i] = true
		}
	}
	spec.bridges = slices.Clone(pairs)
	return nil
}

// New returns a fresh fake machine. name is one of Machines(); an unknown name is an error that
// lists the valid ones.
func New(name string, opts ...Option) (*Machine, error) {
	spec, err := lookupSpec(name)
	if err != nil {
		return nil, err
	}
	c := &config{driverVersion: DefaultDriverVersion, cudaVersion: DefaultCUDADriverVersion}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.bridges != nil {
		if err := applyBridges(&spec, *c.bridges); err != nil {
			return nil, err
		}
	}
	m := &Machine{
		spec:          spec,
		driverVersion: c.driverVersion,
		cudaVersion:   c.cudaVersion,
		calls:         map[string]int{},
	}
	geometry, err := machineGeometry(spec.model)
	if err != nil {
		return nil, err
	}
	for i := range spec.slots {
		d, err := newDevice(m, i, geometry)
		if err != nil {
			return nil, err
		}
		m.devices = append(m.devices, d)
	}
	m.setInterfaceFuncs()
	if err := m.applyFabric(c); err != nil {
		return nil, err
	}
	if err := m.applyProfileEdits(c.profileEdits); err != nil {
		return nil, err
	}
	if err := m.applyMIG(c); err != nil {
		return nil, err
	}
	if c.stateDir != "" {
		if err := m.loadOrSaveState(c.stateDir); err != nil {
			return nil, err
		}
	}
	// Faults and the hook are installed last so that building the initial layout does not
	// consume or report them.
	m.faults, m.callHook = c.faults, c.callHook
	return m, nil
}

// Name returns the machine's name, as given to New.
func (m *Machine) Name() string { return m.spec.name }

// Device returns the fake device of GPU index i, or nil if there is none. Its mock func fields
// may be replaced to change one method for one GPU.
func (m *Machine) Device(i int) *Device {
	if i < 0 || i >= len(m.devices) {
		return nil
	}
	return m.devices[i]
}

// NumGPUs returns the number of GPUs of the machine.
func (m *Machine) NumGPUs() int { return len(m.devices) }

// Calls returns how many times method has been called since New. method is named as for
// WithFault: unqualified ("Destroy": every kind) or qualified ("GpuInstance.Destroy").
func (m *Machine) Calls(method string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[method]
}

// InjectFault makes the nth call of method from now on (1-based) fail with ret.
func (m *Machine) InjectFault(method string, n int, ret nvml.Return) error {
	return m.addFault(method, n, ret, false)
}

// InjectFaultAfter makes every call of method after the next n fail with ret; n = 0 fails every
// call from now on.
func (m *Machine) InjectFaultAfter(method string, n int, ret nvml.Return) error {
	return m.addFault(method, n, ret, true)
}

// ClearFaults removes every injected fault.
func (m *Machine) ClearFaults() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = nil
}

func (m *Machine) addFault(method string, n int, ret nvml.Return, after bool) error {
	f, err := newFault(method, n, ret, after)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f.base = m.calls[method]
	m.faults = append(m.faults, f)
	return nil
}

type fault struct {
	method string
	n      int
	after  bool
	ret    nvml.Return
	base   int // calls of method when the fault was set
}

func newFault(method string, n int, ret nvml.Return, after bool) (*fault, error) {
	switch {
	case method == "":
		return nil, fmt.Errorf("gputest: fault: empty method name")
	case ret == nvml.SUCCESS:
		return nil, fmt.Errorf("gputest: fault on %s: ret must be an error, not SUCCESS", method)
	case !after && n < 1:
		return nil, fmt.Errorf("gputest: fault on %s: call number %d must be >= 1", method, n)
	case after && n < 0:
		return nil, fmt.Errorf("gputest: fault on %s: call count %d must be >= 0", method, n)
	}
	return &fault{method: method, n: n, after: after, ret: ret}, nil
}

// enter counts one call of kind.method and returns the injected failure for it, or SUCCESS.
// The caller holds m.mu.
func (m *Machine) enter(kind, method string) nvml.Return {
	q := kind + "." + method
	if m.callHook != nil {
		m.callHook(q)
	}
	m.calls[method]++
	m.calls[q]++
	for _, f := range m.faults {
		if f.method != method && f.method != q {
			continue
		}
		c := m.calls[f.method] - f.base
		if (!f.after && c == f.n) || (f.after && c > f.n) {
			return f.ret
		}
	}
	return nvml.SUCCESS
}

// uuidNamespace makes fake UUIDs deterministic and distinct from real ones.
var uuidNamespace = uuid.MustParse("5f1e8a52-4d1b-4b8e-9a7c-6770b1d2e0a1")

func gpuUUID(machine string, index int) string {
	return "GPU-" + uuid.NewSHA1(uuidNamespace, fmt.Appendf(nil, "%s/gpu/%d", machine, index)).String()
}

func migUUID(parent string, gi, ci uint32, gen uint64) string {
	return "MIG-" + uuid.NewSHA1(uuidNamespace, fmt.Appendf(nil, "%s/gi/%d/ci/%d/%d", parent, gi, ci, gen)).String()
}

// gate lets a call on an object of kind ("Interface", "EventSet") through unless a fault is
// injected for it.
func (m *Machine) gate(kind string) gate {
	return gate{mu: &m.mu, enter: func(method string) nvml.Return { return m.enter(kind, method) }}
}

func (m *Machine) setInterfaceFuncs() {
	g := m.gate("Interface")
	m.InitFunc = guardRet(g, "Init", m.initLocked)
	m.InitWithFlagsFunc = guardRet1(g, "InitWithFlags", func(uint32) nvml.Return { return m.initLocked() })
	m.ShutdownFunc = guardRet(g, "Shutdown", m.shutdownLocked)
	m.SystemGetDriverVersionFunc = get(g, "SystemGetDriverVersion", func() string { return m.driverVersion })
	m.SystemGetCudaDriverVersionFunc = get(g, "SystemGetCudaDriverVersion", func() int { return m.cudaVersion })
	m.SystemGetCudaDriverVersion_v2Func = m.SystemGetCudaDriverVersionFunc
	m.SystemGetNVMLVersionFunc = get(g, "SystemGetNVMLVersion", func() string { return fmt.Sprintf("%d.%s", m.cudaVersion/1000, m.driverVersion) })
	m.DeviceGetCountFunc = get(g, "DeviceGetCount", func() int { return len(m.devices) })
	m.DeviceGetHandleByIndexFunc = guard1(g, "DeviceGetHandleByIndex", m.deviceByIndex)
	m.DeviceGetHandleByUUIDFunc = guard1(g, "DeviceGetHandleByUUID", m.deviceByUUID)
	m.DeviceGetHandleByPciBusIdFunc = guard1(g, "DeviceGetHandleByPciBusId", m.deviceByBusID)
	m.ErrorStringFunc = func(r nvml.Return) string { return r.Error() }
	m.EventSetCreateFunc = get(g, "EventSetCreate", m.createEventSet)
	m.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
	}
	fillDefaults(m, &m.Interface, "Interface", nil)
}

// The methods below are the bodies of the calls setInterfaceFuncs models; each runs behind the
// Interface gate, with m.mu held.

func (m *Machine) initLocked() nvml.Return {
	m.initCount++
	return nvml.SUCCESS
}

func (m *Machine) shutdownLocked() nvml.Return {
	if m.initCount == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	m.initCount--
	return nvml.SUCCESS
}

func (m *Machine) deviceByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(m.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return m.devices[i], nvml.SUCCESS
}

// deviceByUUID finds a GPU or a MIG device by its UUID.
func (m *Machine) deviceByUUID(u string) (nvml.Device, nvml.Return) {
	for _, d := range m.devices {
		if d.uuid == u {
			return d, nvml.SUCCESS
		}
		for _, md := range d.migDevicesLocked() {
			if md.uuid == u {
				return md, nvml.SUCCESS
			}
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (m *Machine) deviceByBusID(busID string) (nvml.Device, nvml.Return) {
	want, ok := parseBusID(busID)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	for _, d := range m.devices {
		if got, _ := parseBusID(d.slot.busID); got == want {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (m *Machine) createEventSet() nvml.EventSet {
	s := newEventSet(m)
	m.eventSets = append(m.eventSets, s)
	return s
}

// parseBusID turns any of NVML's bus ID spellings ("00000000:07:00.0", "0000:07:00.0",
// upper or lower case) into its numbers.
func parseBusID(s string) ([4]uint64, bool) {
	var dom, bus, dev, fn uint64
	if _, err := fmt.Sscanf(s, "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err != nil {
		return [4]uint64{}, false
	}
	return [4]uint64{dom, bus, dev, fn}, true
}

// sortedKeys returns the keys of a map of ids, sorted.
func sortedKeys[V any](mp map[uint32]V) []uint32 {
	ks := make([]uint32, 0, len(mp))
	for k := range mp {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
