package draplugintest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/mig/nvmlmig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
	"github.com/gpudra/gpudra/simulate"
)

// DefaultNodeName is the name of a Node unless WithNodeName says otherwise.
const DefaultNodeName = "node-1"

// Node is one fake GPU node. Plugins built by NewPlugin on the same Node share its machine,
// host and directories, as a restarted plugin process shares the node with the one that
// crashed. A Node is not safe for concurrent Reboot; everything else may run concurrently.
type Node struct {
	// Name is the node name, which is also the pool name.
	Name string
	// Machine is the fake NVML machine (replaced by Reboot); nil on a node built WithNVML.
	Machine *gputest.Machine
	// NVML is the NVML the node's plugins use: Machine, or the library WithNVML gave.
	NVML nvml.Interface
	// Inventory is what enumeration found on NVML at NewNode.
	Inventory *gpu.Inventory
	// Host records sharing host changes (replaced by Reboot).
	Host *sharingtest.FakeHost
	// Dir holds everything below.
	Dir string
	// StateDir, CDIDir and MPSDir are the plugin's checkpoint, CDI spec and MPS directories.
	StateDir, CDIDir, MPSDir string
	// BootIDPath is the file the plugin reads the boot ID from.
	BootIDPath string
	// Generator generates CDI specs for the fake driver installation under Dir.
	Generator *cdi.Generator
	// SliceOptions are the slice builder options the node's plugins publish with
	// (draplugin.Config.SliceOptions).
	SliceOptions []gpudra.Option
	// PCI is the fake PCI host of a node built WithPassthrough, nil otherwise.
	PCI *gputest.PCIHost

	machineName string
	machineOpts []gputest.Option
	ownDir      bool
	sim         *simulate.Simulator
	boot        int
	// persist keeps the machine's and the host's state in files under Dir (WithPersistence).
	persist  bool
	hostHook func(call string) error
	// apiDisabled are the features Serve's fake API server drops (WithAPIFeaturesOff).
	apiDisabled []gpudra.Feature
	// lib is the NVML WithNVML gave, nil for a gputest machine.
	lib nvml.Interface
	// passthrough builds PCI (WithPassthrough) with pciFuncs.
	passthrough bool
	pciFuncs    []gputest.PCIFunction
}

// NodeOption configures NewNode.
type NodeOption func(*Node)

// WithDynamicMIG publishes MIG-capable GPUs as dynamic MIG partitions.
func WithDynamicMIG() NodeOption {
	return func(n *Node) { n.SliceOptions = append(n.SliceOptions, gpudra.WithDynamicMIG(nil)) }
}

// WithSliceOptions adds slice builder options (consumable memory, PCIe roots, ...).
func WithSliceOptions(opts ...gpudra.Option) NodeOption {
	return func(n *Node) { n.SliceOptions = append(n.SliceOptions, opts...) }
}

// WithMachineOptions starts the fake machine with these options (MIG layouts, faults, ...).
func WithMachineOptions(opts ...gputest.Option) NodeOption {
	return func(n *Node) { n.machineOpts = append(n.machineOpts, opts...) }
}

// WithNVML builds the node on lib, any initialized NVML (go-nvml's own mock servers, say,
// wrapped with gputest.NotSupported), instead of a gputest machine: NewNode's machine name is
// then only a label, Machine is nil, WithMachineOptions and WithPersistence do not apply, and
// Reboot fails. MIGInstances lists what lib reports.
func WithNVML(lib nvml.Interface) NodeOption { return func(n *Node) { n.lib = lib } }

// WithAPIFeaturesOff makes the fake API server of Serve drop the fields of the given optional
// ResourceSlice features, as a server with their feature gates off does (NewAPIClient).
func WithAPIFeaturesOff(features ...gpudra.Feature) NodeOption {
	return func(n *Node) { n.apiDisabled = append(n.apiDisabled, features...) }
}

// WithNodeName names the node (default DefaultNodeName).
func WithNodeName(name string) NodeOption { return func(n *Node) { n.Name = name } }

// WithDir puts the node's files under dir, which the caller owns (Close leaves it). The
// default is a new temporary directory with a short path, as the plugin's sockets need.
func WithDir(dir string) NodeOption { return func(n *Node) { n.Dir = dir } }

// WithPersistence keeps the fake machine's state (MIG mode and instances, compute modes) and the
// fake host's (time slices, compute modes, MPS daemons, mounts) in files under the node's
// directory, and keeps its boot ID, so that a Node built again on the same directory — in
// another process, after the first was killed — sees the node as it was: a crash test's restart.
// Reboot then removes those files.
func WithPersistence() NodeOption { return func(n *Node) { n.persist = true } }

// WithHostHook runs hook before every change the fake host makes (sharingtest.FakeHost.SetHook).
func WithHostHook(hook func(call string) error) NodeOption {
	return func(n *Node) { n.hostHook = hook }
}

// NewNode builds a node on the gputest machine of that name. Close removes its files.
func NewNode(machine string, opts ...NodeOption) (*Node, error) {
	n := &Node{Name: DefaultNodeName, machineName: machine}
	for _, o := range opts {
		o(n)
	}
	if n.Dir == "" {
		dir, err := os.MkdirTemp("", "gd")
		if err != nil {
			return nil, err
		}
		n.Dir, n.ownDir = dir, true
	}
	if err := n.build(); err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) build() error {
	n.StateDir, n.CDIDir, n.MPSDir = filepath.Join(n.Dir, "state"), filepath.Join(n.Dir, "cdi"), filepath.Join(n.Dir, "mps")
	n.BootIDPath = filepath.Join(n.Dir, "boot_id")
	if err := n.newBoot(); err != nil {
		return err
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), n.NVML)
	if err != nil {
		return fmt.Errorf("enumerate %s: %w", n.machineName, err)
	}
	n.Inventory = inv
	if n.passthrough {
		if err := n.buildPCI(inv); err != nil {
			return err
		}
	}
	root, err := cditest.Build(filepath.Join(n.Dir, "driver"), cditest.Layout{GPUs: len(inv.GPUs)})
	if err != nil {
		return err
	}
	inst, err := cdi.Discover(root)
	if err != nil {
		return err
	}
	if n.Generator, err = cdi.NewGenerator(inst); err != nil {
		return err
	}
	slices, err := n.ResourceSlices()
	if err != nil {
		return err
	}
	n.sim = simulate.New(n.Name, selectors.DeviceClasses(gpudra.NewBuilder(n.SliceOptions...).DriverName()), slices)
	return nil
}

// State files of a node built WithPersistence.
const (
	machineStateDir = "machine"
	hostStateFile   = "host.json"
)

// newBoot starts a boot: a fresh machine and host, and a new boot ID. A persistent node whose
// files exist continues the boot they record.
func (n *Node) newBoot() error {
	if n.lib != nil {
		return n.newLibBoot()
	}
	opts := n.machineOpts
	if n.persist {
		opts = append(slices.Clone(opts), gputest.WithStateDir(filepath.Join(n.Dir, machineStateDir)))
	}
	m, err := gputest.New(n.machineName, opts...)
	if err != nil {
		return err
	}
	uuids := make([]string, 0, m.NumGPUs())
	for i := range m.NumGPUs() {
		u, _ := m.Device(i).GetUUID()
		uuids = append(uuids, u)
	}
	n.Machine, n.NVML = m, m
	if n.persist {
		if n.Host, err = sharingtest.OpenFakeHost(filepath.Join(n.Dir, hostStateFile), uuids...); err != nil {
			return err
		}
	} else {
		n.Host = sharingtest.NewFakeHost(uuids...)
	}
	if n.hostHook != nil {
		n.Host.SetHook(n.hostHook)
	}
	return n.writeBootID()
}

// writeBootID starts boot n.boot+1 unless a persistent node's boot goes on.
func (n *Node) writeBootID() error {
	n.boot++
	if _, err := os.Stat(n.BootIDPath); err == nil && n.persist && n.boot == 1 {
		return nil // the boot goes on
	}
	return os.WriteFile(n.BootIDPath, fmt.Appendf(nil, "boot-%d-%d\n", n.boot, time.Now().UnixNano()), 0o600)
}

// newLibBoot starts the only boot of a node built WithNVML.
func (n *Node) newLibBoot() error {
	if n.boot > 0 {
		return errors.New("draplugintest: a node built WithNVML cannot reboot")
	}
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("draplugintest: DeviceGetCount: %w", ret)
	}
	uuids := make([]string, 0, count)
	for i := range count {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("draplugintest: GPU %d: DeviceGetHandleByIndex: %w", i, ret)
		}
		u, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("draplugintest: GPU %d: GetUUID: %w", i, ret)
		}
		uuids = append(uuids, u)
	}
	n.NVML, n.Host = n.lib, sharingtest.NewFakeHost(uuids...)
	if n.hostHook != nil {
		n.Host.SetHook(n.hostHook)
	}
	return n.writeBootID()
}

// Close removes the node's files (unless WithDir gave the directory).
func (n *Node) Close() error {
	if n.ownDir {
		return os.RemoveAll(n.Dir)
	}
	return nil
}

// Reboot simulates a reboot of the node: a new boot ID, a fresh machine (MIG instances gone;
// the machine options are applied again, or replaced by opts when given, as a MIG layout
// changed during the reboot), a fresh host (default settings, no MPS daemon) and an empty CDI
// directory, as with a tmpfs /var/run/cdi. The state directory survives.
func (n *Node) Reboot(opts ...gputest.Option) error {
	if len(opts) > 0 {
		n.machineOpts = opts
	}
	if err := os.RemoveAll(n.CDIDir); err != nil {
		return err
	}
	if err := n.rebootPCI(); err != nil {
		return err
	}
	if n.persist {
		for _, f := range []string{machineStateDir, hostStateFile} {
			if err := os.RemoveAll(filepath.Join(n.Dir, f)); err != nil {
				return err
			}
		}
	}
	return n.newBoot()
}

// Config returns a plugin configuration over the node: its machine, directories, boot ID, a
// new CDI writer and a new sharing manager over the node's host, health monitoring with the
// defaults. Change what a test needs before passing it to draplugin.New.
func (n *Node) Config() (draplugin.Config, error) {
	w, err := cdi.NewWriter(cdi.WithSpecDir(n.CDIDir))
	if err != nil {
		return draplugin.Config{}, err
	}
	driver := gpudra.NewBuilder(n.SliceOptions...).DriverName()
	mgr := sharing.NewManager(driver, sharing.WithTimeSlicer(n.Host),
		sharing.WithComputeModeSetter(n.Host), sharing.WithMPSDaemons(n.Host), sharing.WithMPSRoot(n.MPSDir))
	return draplugin.Config{
		NodeName: n.Name, SliceOptions: slices.Clone(n.SliceOptions), NVML: n.NVML, StateDir: n.StateDir,
		BootIDPath: n.BootIDPath, CDIGenerator: n.Generator, CDIWriter: w, Sharing: mgr,
	}, nil
}

// NewPlugin starts a plugin "process" on the node: Config, changed by each mutate, then
// draplugin.New. It does not reconcile; call Reconcile (or Serve) as a driver's start would.
func (n *Node) NewPlugin(ctx context.Context, mutate ...func(*draplugin.Config)) (*draplugin.Plugin, error) {
	cfg, err := n.Config()
	if err != nil {
		return nil, err
	}
	if err := n.passthroughConfig(&cfg); err != nil {
		return nil, err
	}
	for _, m := range mutate {
		m(&cfg)
	}
	return draplugin.New(ctx, cfg)
}

// ResourceSlices renders the slices the node publishes (without health taints).
func (n *Node) ResourceSlices() ([]*resourceapi.ResourceSlice, error) {
	b := gpudra.NewBuilder(n.SliceOptions...)
	res, err := b.Build(n.Name, n.Inventory)
	if err != nil {
		return nil, err
	}
	return gpudra.ResourceSlices(b.DriverName(), n.Name, res)
}

// Republish makes the node's allocator (Allocate) see the slices p publishes now, with its
// health taints and, with dynamic MIG, the partitions as the GPUs are partitioned now.
func (n *Node) Republish(ctx context.Context, p *draplugin.Plugin) error {
	res, err := p.Resources(ctx)
	if err != nil {
		return err
	}
	slices, err := gpudra.ResourceSlices(p.DriverName(), n.Name, res)
	if err != nil {
		return err
	}
	n.sim.Publish(slices)
	return nil
}

// Specs lists the claim UIDs that have a CDI spec on the node.
func (n *Node) Specs() ([]string, error) {
	w, err := cdi.NewWriter(cdi.WithSpecDir(n.CDIDir))
	if err != nil {
		return nil, err
	}
	return w.List()
}

// MIGInstances lists the MIG GPU instances on the machine as "<gpu index>:<profile>@<start>".
func (n *Node) MIGInstances() []string {
	if n.Machine == nil {
		return n.libMIGInstances()
	}
	var out []string
	for i := range n.Machine.NumGPUs() {
		for _, gi := range n.Machine.GPUInstances(i) {
			out = append(out, fmt.Sprintf("%d:%s@%d", i, gi.Profile, gi.Placement.Start))
		}
	}
	return out
}

// libMIGInstances lists the MIG GPU instances of a node built WithNVML, as "<gpu index>:<NVML
// GPU-instance profile Id>@<start>", or one "<gpu index>:error ..." entry for a GPU that could
// not be listed.
func (n *Node) libMIGInstances() []string {
	var out []string
	count, _ := n.NVML.DeviceGetCount()
	for i := range count {
		d, ret := n.NVML.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			out = append(out, fmt.Sprintf("%d:error %v", i, ret))
			continue
		}
		gis, err := nvmlmig.ListInstances(d)
		if err != nil {
			out = append(out, fmt.Sprintf("%d:error %v", i, err))
		}
		for _, gi := range gis {
			out = append(out, fmt.Sprintf("%d:%d@%d", i, gi.Profile.Id, gi.Placement.Start))
		}
	}
	return out
}

// HostClean returns an error naming every host setting that is not back to its default: a
// compute mode, a time slice, a running MPS daemon, a PCI function not on its own driver
// (WithPassthrough).
func (n *Node) HostClean() error {
	st := n.Host.State()
	var errs []error
	for u, m := range st.ComputeModes {
		if m != sharing.ComputeModeDefault {
			errs = append(errs, fmt.Errorf("device %s left in compute mode %s", u, m))
		}
	}
	for u, v := range st.TimeSlices {
		if v != 0 {
			errs = append(errs, fmt.Errorf("GPU %s left with time slice %d", u, v))
		}
	}
	for id := range st.Daemons {
		errs = append(errs, fmt.Errorf("MPS daemon %s left running", id))
	}
	for dir := range st.Mounts {
		errs = append(errs, fmt.Errorf("tmpfs left mounted on %s", dir))
	}
	if n.PCI != nil {
		errs = append(errs, n.PCI.Native())
	}
	return errors.Join(errs...)
}
