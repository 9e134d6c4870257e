package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	inputpkg "github.com/gpudra/gpudra/internal/input"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/sharing/sharingtest"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

const defaultMachine = "dgx-a100-40gb"

// Names of the node flags; each command registers those it uses.
const (
	flagNVML             = "nvml"
	flagMachine          = "machine"
	flagMIGConfig        = "mig-config"
	flagNodeName         = "node-name"
	flagDynamicMIG       = "dynamic-mig"
	flagConsumableMemory = "consumable-memory"
	// flagDriverRoot comes with flagNVML: where --nvml=real loads NVML from.
	flagDriverRoot = "driver-root"
)

// allNodeFlags are the node flags in the order help lists them.
var allNodeFlags = []string{flagNVML, flagMachine, flagMIGConfig, flagNodeName, flagDynamicMIG, flagConsumableMemory}

// nodeFlags choose the machine a command runs on and what the driver publishes for it.
type nodeFlags struct {
	nvmlMode         string
	machine          string
	migConfig        string
	nodeName         string
	dynamicMIG       bool
	consumableMemory bool
	// driverRoot is the NVIDIA driver root NVML is loaded from with --nvml=real ("" is "/").
	driverRoot string
	// fs is the flag set the flags were registered in (to tell given flags from defaults).
	fs *pflag.FlagSet
	// warn, when set, reports --consumable-memory dropped on GPUs partitioned by --dynamic-mig
	// instead of refusing the combination (serve: a chart may set both for mixed nodes).
	warn func(msg string)
	// skipFailedGPUs leaves out, with a warning, a GPU that fails to enumerate instead of
	// failing (serve: one broken GPU must not take the node's others off the cluster).
	skipFailedGPUs bool
	// machineOpts are extra options of the fake machine (tests inject NVML faults with them).
	machineOpts []gputest.Option
	// passthrough publishes GPUs for passthrough as serve --passthrough would (render and
	// check; serve has its own flags, passthrough.go).
	passthrough bool
	// partitionsFirst and oneMEPlacement are the dynamic MIG publishing options, migByProfile
	// the static one (registerMIGPublishing).
	partitionsFirst, oneMEPlacement, migByProfile bool
}

// Names of the dynamic MIG publishing flags (registerMIGPublishing).
const (
	flagPartitionsFirst = "mig-partitions-first"
	flagOneMEPlacement  = "mig-one-me-placement"
	flagMIGByProfile    = "mig-by-profile"
)

// registerMIGPublishing adds the flags that change how MIG devices are published (serve, render,
// check, demo): with --dynamic-mig gpudra.WithPartitionsFirst and
// gpudra.WithOneMediaExtensionPlacement, without it gpudra.WithMIGDevicesByProfile.
func (n *nodeFlags) registerMIGPublishing(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.BoolVar(&n.partitionsFirst, flagPartitionsFirst, false, "with --dynamic-mig: publish the MIG partitions before the full GPUs, "+
		"which makes MIG claims cheaper for the scheduler and full-GPU claims dearer (for nodes that serve MIG claims only; docs/benchmarks.md)")
	fs.BoolVar(&n.oneMEPlacement, flagOneMEPlacement, false, "with --dynamic-mig: publish each +me profile at one placement per GPU instead of every placement "+
		"(at most one such instance exists per GPU; fewer devices for the scheduler, but a +me claim then fits a GPU only while that placement is free)")
	fs.BoolVar(&n.migByProfile, flagMIGByProfile, false, "without --dynamic-mig: publish the GPUs' existing MIG devices grouped by profile, smallest first, after the full GPUs, "+
		"which makes claims for small profiles cheaper for the scheduler and claims for large ones dearer (each claim for one profile gets the same device; docs/benchmarks.md)")
}

// registerPassthrough adds --passthrough (render, check).
func (n *nodeFlags) registerPassthrough(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&n.passthrough, "passthrough", false, "also publish GPUs for passthrough to virtual machines (vfio devices, DeviceClass vfio.gpu.nvidia.com) as serve --passthrough does: "+
		"a fake machine's GPUs in its fake PCI host's IOMMU groups, a real node's as /sys reports them")
}

// register adds the named node flags to the command; the other node flags, which earlier
// versions accepted everywhere, stay accepted but are hidden and warn that they do nothing here.
func (n *nodeFlags) register(cmd *cobra.Command, names ...string) {
	fs := cmd.Flags()
	n.fs = fs
	for _, name := range allNodeFlags {
		if !slices.Contains(names, name) {
			registerNoOp(fs, name, cmd.Name())
			continue
		}
		switch name {
		case flagNVML:
			fs.StringVar(&n.nvmlMode, name, "fake", "NVML backend: fake (an embedded fake machine) or real (libnvidia-ml, read-only enumeration)")
			completeValues(cmd, name, "fake", "real")
			fs.StringVar(&n.driverRoot, flagDriverRoot, "/", "with --nvml=real: the NVIDIA driver root NVML is loaded from, by its path in the root's library directories "+
				"(/ on a host install; where this runs in a container, the host's driver root mounted into it, e.g. /driver-root)")
		case flagMachine:
			fs.StringVar(&n.machine, name, defaultMachine, "fake machine: "+strings.Join(gputest.Machines(), ", "))
			completeValues(cmd, name, gputest.Machines()...)
		case flagMIGConfig:
			fs.StringVar(&n.migConfig, name, "", "fake machines: start with this mig-parted config (a built-in name such as all-balanced, or a file)")
			_ = cmd.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
				return slices.Sorted(maps.Keys(mig.BuiltinConfigs().MigConfigs)), cobra.ShellCompDirectiveDefault
			})
		case flagNodeName:
			fs.StringVar(&n.nodeName, name, "node-1", "node name; also the pool name")
		case flagDynamicMIG:
			fs.BoolVar(&n.dynamicMIG, name, false, "publish every MIG placement of MIG-capable GPUs as a partitionable device (shared counters)")
		case flagConsumableMemory:
			fs.BoolVar(&n.consumableMemory, name, false, "let several claims share a full GPU by memory (consumable capacity); not on GPUs partitioned by --dynamic-mig")
		}
	}
}

// noOpAnnotation marks a flag that is accepted but does nothing in its command.
const noOpAnnotation = "gpudra.io/no-op"

// registerNoOp keeps a node flag that does nothing in this command accepted, hidden from help;
// runE warns when it is used.
func registerNoOp(fs *pflag.FlagSet, name, command string) {
	if name == flagDynamicMIG || name == flagConsumableMemory {
		fs.Bool(name, false, "")
	} else {
		fs.String(name, "", "")
	}
	_ = fs.MarkHidden(name)
	_ = fs.SetAnnotation(name, noOpAnnotation, []string{command})
}

// warnNoOps warns about the no-op flags given on the command line.
func warnNoOps(fs *pflag.FlagSet, w io.Writer) {
	fs.Visit(func(f *pflag.Flag) {
		if cmd, ok := f.Annotations[noOpAnnotation]; ok {
			fmt.Fprintf(w, "warning: --%s has no effect on %s; it is accepted only for older command lines\n", f.Name, cmd[0])
		}
	})
}

// inEffect returns the flags as they act on inv: --dynamic-mig is dropped when no GPU is
// MIG-capable (it changes nothing there), so that a report names what really ran.
func (nf nodeFlags) inEffect(inv *gpu.Inventory) nodeFlags {
	if nf.dynamicMIG && !slices.ContainsFunc(inv.GPUs, func(g gpu.GPU) bool { return g.MIGCapable }) {
		nf.dynamicMIG = false
	}
	return nf
}

// validate checks the flags that need no machine: a usage error otherwise.
func (n *nodeFlags) validate() error {
	if n.has(flagNVML) {
		if err := oneOf(flagNVML, n.nvmlMode, "fake", "real"); err != nil {
			return err
		}
	}
	if n.has(flagMachine) && n.nvmlMode != "real" {
		if err := oneOf(flagMachine, n.machine, gputest.Machines()...); err != nil {
			return err
		}
	}
	if n.has(flagNVML) && n.driverRoot != "" && !filepath.IsAbs(n.driverRoot) {
		return usageErrorf("--%s=%q: must be an absolute path", flagDriverRoot, n.driverRoot)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{flagPartitionsFirst, n.partitionsFirst}, {flagOneMEPlacement, n.oneMEPlacement}} {
		if f.set && !n.dynamicMIG {
			return usageErrorf("--%s needs --dynamic-mig: it changes how MIG partitions are published", f.name)
		}
	}
	if n.migByProfile && n.dynamicMIG {
		return usageErrorf("--%s orders existing (static) MIG devices; it cannot be combined with --dynamic-mig, whose partitions are always grouped by profile", flagMIGByProfile)
	}
	if n.nvmlMode == "real" && n.migConfig != "" {
		return usageErrorf("--mig-config applies to fake machines only; with --nvml=real the GPUs' current MIG layout is read")
	}
	if n.has(flagNodeName) {
		if err := gpudra.ValidateNodeName(n.nodeName); err != nil {
			return usageErrorf("--node-name: %w", err)
		}
	}
	return nil
}

// has says whether the command registered the flag (as more than a no-op).
func (n *nodeFlags) has(name string) bool {
	if n.fs == nil {
		return true // built by a caller, not from flags
	}
	f := n.fs.Lookup(name)
	return f != nil && f.Annotations[noOpAnnotation] == nil
}

// node is an opened NVML backend and what was enumerated on it.
type node struct {
	// machine is the fake machine, nil with --nvml=real.
	machine *gputest.Machine
	// host records the host actions of sharing on a fake machine (serve only); nil otherwise.
	host  *sharingtest.FakeHost
	nvml  nvml.Interface
	inv   *gpu.Inventory
	topo  *topology.Topology
	close func()
	// passthrough is the slice option of --passthrough (render, check), nil without.
	passthrough gpudra.Option
}

// open validates the flags, opens the machine and enumerates it. Flag values the machine
// rejects (a mig-parted config its GPUs cannot hold) are usage errors.
func (n *nodeFlags) open(ctx context.Context) (*node, error) {
	if err := n.validate(); err != nil {
		return nil, err
	}
	sess, machine, err := n.session(ctx)
	if err != nil {
		return nil, err
	}
	inv, err := sess.Enumerate(ctx, nvmlgpu.SkipFailedGPUs(n.skipFailedGPUs))
	if err != nil {
		_ = sess.Close()
		return nil, err
	}
	for _, e := range inv.Errors {
		if n.warn == nil {
			break
		}
		n.warn(fmt.Sprintf("GPU %d is not served: it failed to enumerate: %v", e.Index, e))
	}
	if err := n.checkMachine(ctx, inv); err != nil {
		_ = sess.Close()
		return nil, err
	}
	var topoOpts []nvmltopology.Option
	if machine != nil {
		// Fake machines have no sysfs: PCIe roots are derived from the NVML topology.
		topoOpts = append(topoOpts, nvmltopology.WithoutSysfs())
	}
	topo, err := nvmltopology.Discover(sess.Interface(), topoOpts...)
	if err != nil {
		_ = sess.Close()
		return nil, err
	}
	nd := &node{machine: machine, nvml: sess.Interface(), inv: inv, topo: topo, close: func() { _ = sess.Close() }}
	if n.passthrough {
		if nd.passthrough, err = offlinePassthrough(ctx, inv, machine != nil); err != nil {
			_ = sess.Close()
			return nil, err
		}
	}
	return nd, nil
}

func (n *nodeFlags) session(ctx context.Context) (*nvmlgpu.Session, *gputest.Machine, error) {
	if n.nvmlMode == "real" {
		// By path, never through LD_LIBRARY_PATH: the driver root's libc.so.6 may be another
		// glibc than this process's (issue 27).
		sess, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(n.driverRoot))
		return sess, nil, err
	}
	var opts []gputest.Option
	if n.migConfig != "" {
		if _, _, err := loadMIGConfig(ctx, n.migConfig); err != nil {
			return nil, nil, usageErrorf("--mig-config: %w", err)
		}
		opts = append(opts, gputest.WithMIGConfig(n.migConfig))
	}
	m, err := gputest.New(n.machine, append(opts, n.machineOpts...)...)
	if err != nil {
		return nil, nil, usageErrorf("--machine %s --mig-config %s: %w", n.machine, n.migConfig, err)
	}
	sess, err := nvmlgpu.Open(m)
	return sess, m, err
}

// checkMachine rejects flags that would silently do nothing or less than asked on this machine.
func (n *nodeFlags) checkMachine(ctx context.Context, inv *gpu.Inventory) error {
	if n.migConfig != "" {
		spec, name, err := loadMIGConfig(ctx, n.migConfig)
		if err != nil {
			return usageErrorf("--mig-config: %w", err)
		}
		if problems := configProblems(spec, name, inv); len(problems) > 0 {
			return usageErrorf("--mig-config %s on %s: %s", n.migConfig, n.machineLabel(), strings.Join(problems, "; "))
		}
	}
	if n.dynamicMIG && n.consumableMemory {
		var partitioned []string
		for _, g := range inv.GPUs {
			if g.MIGCapable {
				partitioned = append(partitioned, fmt.Sprint(g.Index))
			}
		}
		if len(partitioned) > 0 {
			msg := fmt.Sprintf("--consumable-memory shares full GPUs by memory, but --dynamic-mig publishes MIG-capable GPUs as MIG partitions instead "+
				"(GPUs %s of %s)", strings.Join(partitioned, ","), n.machineLabel())
			if n.warn == nil {
				return usageErrorf("%s; drop one of the two flags", msg)
			}
			n.warn(msg + ": consumable memory applies to the other GPUs only (to all of them if the API server turns out to drop dynamic MIG: see the negotiation log line)")
		}
	}
	return nil
}

// loadMIGConfig reads a --mig-config value the way gputest.WithMIGConfig does: a mig-parted file
// holding one configuration, or the name of a built-in configuration.
func loadMIGConfig(ctx context.Context, nameOrFile string) (*mig.ConfigSpec, string, error) {
	data, err := inputpkg.ReadFile(ctx, nameOrFile, inputpkg.ConfigLimit)
	if err == nil {
		err = inputpkg.Text(nameOrFile, data)
		if err != nil {
			return nil, "", err
		}
	}
	switch {
	case err == nil:
		spec, err := mig.ParseConfig(data)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", nameOrFile, err)
		}
		if len(spec.MigConfigs) != 1 {
			return nil, "", fmt.Errorf("%s holds %d configurations (%s); --mig-config needs a file with one",
				nameOrFile, len(spec.MigConfigs), strings.Join(slices.Sorted(maps.Keys(spec.MigConfigs)), ", "))
		}
		for name := range spec.MigConfigs {
			return spec, name, nil
		}
	case errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(nameOrFile, os.PathSeparator):
		spec := mig.BuiltinConfigs()
		if _, ok := spec.MigConfigs[nameOrFile]; !ok {
			return nil, "", fmt.Errorf("%q is neither a file nor a built-in mig-parted configuration (built-in: %s)",
				nameOrFile, strings.Join(slices.Sorted(maps.Keys(spec.MigConfigs)), ", "))
		}
		return spec, nameOrFile, nil
	}
	return nil, "", err
}

// configProblems are what mig.CheckConfig accepts but a person would not mean: entries naming
// GPU indexes the machine does not have, and a configuration that asks for MIG but enables it
// on no GPU of the machine.
func configProblems(spec *mig.ConfigSpec, name string, inv *gpu.Inventory) []string {
	var problems []string
	enables := false
	for i, e := range spec.MigConfigs[name] {
		enables = enables || (e.MigEnabled != nil && *e.MigEnabled)
		var missing []string
		for _, idx := range e.Devices.Indexes {
			if idx < 0 || idx >= len(inv.GPUs) {
				missing = append(missing, fmt.Sprint(idx))
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("entry %d names device %s, but the machine has GPUs 0-%d only",
				i, strings.Join(missing, ", "), len(inv.GPUs)-1))
		}
	}
	if !enables {
		return problems
	}
	plans, err := mig.CheckConfig(spec, name, migGPUs(inv))
	if err != nil {
		return problems // the configuration's own errors say more
	}
	for _, p := range plans {
		if p.MigEnabled {
			return problems
		}
	}
	for _, g := range inv.GPUs {
		if g.MIGCapable {
			return append(problems, "it enables MIG, but on none of this machine's GPUs")
		}
	}
	return append(problems, fmt.Sprintf("it enables MIG, but no GPU is MIG-capable (%s)", productNames(inv)))
}

// migGPUs describes the inventory's GPUs for mig.CheckConfig.
func migGPUs(inv *gpu.Inventory) []mig.GPUInfo {
	gpus := make([]mig.GPUInfo, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		gpus = append(gpus, mig.GPUInfo{Index: g.Index, ProductName: g.ProductName, PCIDeviceID: g.PCIDeviceID})
	}
	return gpus
}

func productNames(inv *gpu.Inventory) string {
	var names []string
	for _, g := range inv.GPUs {
		if !slices.Contains(names, g.ProductName) {
			names = append(names, g.ProductName)
		}
	}
	return strings.Join(names, ", ")
}

func (n *nodeFlags) machineLabel() string {
	if n.nvmlMode == "real" {
		return "this node"
	}
	return n.machine
}

func (n *nodeFlags) builderOptions(nd *node) []gpudra.Option {
	// WithTopology publishes NVLink islands, fabric domains and PCIe switches and orders the
	// GPUs for the allocator's first fit; pcieRoot stays what PCIeRoot resolves (sysfs first).
	opts := []gpudra.Option{gpudra.WithPCIeRoot(nd.topo.PCIeRoot), gpudra.WithTopology(nd.topo)}
	if n.dynamicMIG {
		opts = append(opts, gpudra.WithDynamicMIG(nil))
		if n.partitionsFirst {
			opts = append(opts, gpudra.WithPartitionsFirst())
		}
		if n.oneMEPlacement {
			opts = append(opts, gpudra.WithOneMediaExtensionPlacement())
		}
	} else if n.migByProfile {
		opts = append(opts, gpudra.WithMIGDevicesByProfile())
	}
	if n.consumableMemory {
		opts = append(opts, gpudra.WithConsumableMemory(gpudra.ConsumableMemory{}))
	}
	if nd.passthrough != nil {
		opts = append(opts, nd.passthrough)
	}
	return opts
}
