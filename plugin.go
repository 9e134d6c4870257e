package gpudra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/sharing"
)

// SharingEngine is what the plugin needs from the sharing package: *sharing.Manager implements
// it. Plan must not touch the host; Prepare makes the host changes of a claim and returns the
// record that Undo reverses; Restore rebuilds the engine's registry of prepared claims after a
// restart.
type SharingEngine interface {
	Plan(ctx context.Context, claim *resourceapi.ResourceClaim, lookup sharing.DeviceLookup) (*sharing.Record, error)
	Prepare(ctx context.Context, claim *resourceapi.ResourceClaim, lookup sharing.DeviceLookup) (*sharing.Record, error)
	Undo(ctx context.Context, rec *sharing.Record) error
	Restore(records []sharing.Record) error
}

// PluginStep names one step of prepare or unprepare. The plugin calls PluginConfig.AfterStep
// after each of them, so tests can stop the plugin at every point a real crash could.
type PluginStep string

// The steps of prepare and unprepare, in the order they happen.
const (
	// StepPrepareStarted: the claim was recorded as PrepareStarted, with what will be done.
	StepPrepareStarted PluginStep = "prepare-started"
	// StepMIGCreated: one dynamic MIG instance was created (once per created instance).
	StepMIGCreated PluginStep = "mig-created"
	// StepSharingApplied: the sharing engine made its host changes (time slice, compute mode, MPS).
	StepSharingApplied PluginStep = "sharing-applied"
	// StepSharingRecorded: the sharing record (with its undo steps) is in the checkpoint.
	StepSharingRecorded PluginStep = "sharing-recorded"
	// StepCDIWritten: the claim's CDI spec was written.
	StepCDIWritten PluginStep = "cdi-written"
	// StepPrepareCompleted: the claim was recorded as PrepareCompleted.
	StepPrepareCompleted PluginStep = "prepare-completed"
	// StepUnprepareStarted: the claim was recorded as UnprepareStarted.
	StepUnprepareStarted PluginStep = "unprepare-started"
	// StepCDIRemoved: the claim's CDI spec was removed.
	StepCDIRemoved PluginStep = "cdi-removed"
	// StepSharingUndone: the claim's host changes were undone.
	StepSharingUndone PluginStep = "sharing-undone"
	// StepMIGDestroyed: one MIG instance the plugin had created was destroyed.
	StepMIGDestroyed PluginStep = "mig-destroyed"
	// StepUnprepareCompleted: the claim was removed from the checkpoint.
	StepUnprepareCompleted PluginStep = "unprepare-completed"
)

// PluginConfig configures NewPlugin. NodeName, StateDir, CDIGenerator, CDIWriter and one of NVML
// or Inventory are required; everything else has a production default.
type PluginConfig struct {
	// DriverName is the DRA driver name (default DefaultDriverName). Only allocation results of
	// this driver are prepared.
	DriverName string
	// NodeName is the node the plugin runs on; its pool carries the same name.
	NodeName string
	// NVML is an initialized NVML ((*gpu.Session).Interface(), or a gpu/gputest machine). It is used to
	// enumerate GPUs when Inventory is nil, by the default MIG controller, and for health events.
	// The caller owns Init and Shutdown.
	NVML nvml.Interface
	// Inventory is the node's GPUs; when nil it is enumerated from NVML by NewPlugin.
	Inventory *gpu.Inventory
	// StateDir holds the checkpoint (internal/checkpoint) and the record of MIG instances that
	// existed before the plugin first ran in the current boot. Use a persistent directory, for
	// example /var/lib/kubelet/plugins/<driver>.
	StateDir string
	// CheckpointOptions are passed to checkpoint.Open (boot ID source, clock, logger).
	CheckpointOptions []checkpoint.Option
	// CDIGenerator and CDIWriter generate and store the per-claim CDI specs.
	CDIGenerator *cdi.Generator
	CDIWriter    *cdi.Writer
	// Sharing resolves opaque configs and applies sharing strategies; default a
	// sharing.Manager for DriverName without host interfaces, which prepares exclusive devices
	// and fails time-slicing and MPS with an error naming the missing option.
	Sharing SharingEngine
	// DynamicMIG publishes MIG-capable GPUs as dynamic MIG partitions (WithDynamicMIG) and
	// creates a partition's MIG instance when a claim that got it is prepared.
	DynamicMIG bool
	// MIG creates and destroys MIG instances; default NewNVMLMIGController(NVML).
	MIG MIGController
	// MIGLookup maps a product name to its MIG geometry (default mig.Lookup).
	MIGLookup func(productName string) (*mig.Model, error)
	// SliceOptions are extra options for the ResourceSlice builder (consumable memory, PCIe
	// roots, slice size). The plugin adds WithDriverName, WithDynamicMIG and WithDeviceTaints
	// itself; a WithDeviceTaints given here is replaced by the health taints.
	SliceOptions []Option
	// Health configures health monitoring.
	Health HealthConfig
	// Metrics is where the plugin registers its Prometheus metrics; nil registers nothing
	// (the global default registry is never used).
	Metrics prometheus.Registerer
	// Logger is the plugin's logger (default klog.Background()); per-call logs use the
	// logger of the call's context, with claim and device keys added.
	Logger *klog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// AfterStep, when set, is called after every step of prepare and unprepare. An error
	// stops the operation at once, without any cleanup, as a crash would; it is for tests.
	AfterStep func(step PluginStep, claimUID types.UID) error
}

// Plugin is a crash-safe kubelet DRA plugin for NVIDIA GPUs: it implements
// kubeletplugin.DRAPlugin. Prepare and unprepare are idempotent, serialized per physical GPU
// (claims on different GPUs run in parallel), recorded in a checkpoint before and after every
// side effect, and undone exactly on failure; Reconcile repairs what a crash or a reboot left.
// Health events become device taints and health reports. Build one with NewPlugin and run it
// with Start.
type Plugin struct {
	driverName string
	nodeName   string
	lib        nvml.Interface
	inv        *gpu.Inventory
	store      *checkpoint.Store
	loadReport checkpoint.LoadReport
	stateDir   string
	gen        *cdi.Generator
	writer     *cdi.Writer
	sharing    SharingEngine
	mig        MIGController
	dynamicMIG bool
	migLookup  func(string) (*mig.Model, error)
	builder    *Builder
	afterStep  func(PluginStep, types.UID) error
	logger     klog.Logger
	now        func() time.Time
	metrics    *pluginMetrics
	health     *healthState

	gpusByMinor map[int]*gpu.GPU
	gpusByUUID  map[string]*gpu.GPU
	// static maps the names of MIG devices that existed at start (static MIG) to them.
	static map[string]*gpu.MIGDevice
	// published are the names of every device the plugin publishes.
	published []string

	locksMu sync.Mutex
	locks   map[string]*sync.Mutex

	helperMu sync.Mutex
	helper   *kubeletplugin.Helper
}

var _ kubeletplugin.DRAPlugin = (*Plugin)(nil)

// NewPlugin opens the checkpoint and builds a plugin from cfg. It does not touch hardware or
// files beyond the checkpoint: call Reconcile (Start does) before serving.
func NewPlugin(cfg PluginConfig) (*Plugin, error) {
	p := &Plugin{
		driverName: cfg.DriverName, nodeName: cfg.NodeName, lib: cfg.NVML, inv: cfg.Inventory,
		stateDir: cfg.StateDir, gen: cfg.CDIGenerator, writer: cfg.CDIWriter, sharing: cfg.Sharing,
		mig: cfg.MIG, dynamicMIG: cfg.DynamicMIG, migLookup: cfg.MIGLookup, afterStep: cfg.AfterStep,
		now: cfg.Now, locks: map[string]*sync.Mutex{},
	}
	if p.driverName == "" {
		p.driverName = DefaultDriverName
	}
	if cfg.Logger != nil {
		p.logger = *cfg.Logger
	} else {
		p.logger = klog.Background()
	}
	p.logger = p.logger.WithName("gpudra-plugin")
	if p.now == nil {
		p.now = time.Now
	}
	if p.migLookup == nil {
		p.migLookup = mig.Lookup
	}
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("plugin config: NodeName is required")
	case cfg.StateDir == "":
		return nil, errors.New("plugin config: StateDir is required (a persistent directory for the checkpoint)")
	case cfg.CDIGenerator == nil || cfg.CDIWriter == nil:
		return nil, errors.New("plugin config: CDIGenerator and CDIWriter are required")
	case cfg.NVML == nil && cfg.Inventory == nil:
		return nil, errors.New("plugin config: NVML or Inventory is required")
	}
	if p.inv == nil {
		inv, err := gpu.Enumerate(context.Background(), cfg.NVML)
		if err != nil {
			return nil, fmt.Errorf("enumerate GPUs: %w", err)
		}
		p.inv = inv
	}
	if p.sharing == nil {
		p.sharing = sharing.NewManager(sharing.WithDriverName(p.driverName))
	}
	if p.mig == nil && cfg.NVML != nil {
		p.mig = NewNVMLMIGController(cfg.NVML, p.migLookup)
	}
	p.gpusByMinor = map[int]*gpu.GPU{}
	p.gpusByUUID = map[string]*gpu.GPU{}
	p.static = map[string]*gpu.MIGDevice{}
	for i := range p.inv.GPUs {
		g := &p.inv.GPUs[i]
		p.gpusByMinor[g.Minor] = g
		p.gpusByUUID[g.UUID] = g
	}
	p.health = newHealthState(cfg.Health, p)
	opts := append(slices.Clone(cfg.SliceOptions), WithDriverName(p.driverName), WithDeviceTaints(p.health.taints))
	if p.dynamicMIG {
		opts = append(opts, WithDynamicMIG(p.migLookup))
	}
	p.builder = NewBuilder(opts...)
	if err := p.indexDevices(); err != nil {
		return nil, err
	}
	copts := append([]checkpoint.Option{checkpoint.WithLogger(p.logger)}, cfg.CheckpointOptions...)
	store, report, err := checkpoint.Open(cfg.StateDir, copts...)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	p.store, p.loadReport = store, report
	p.metrics = newPluginMetrics(cfg.Metrics, p)
	return p, nil
}

// indexDevices records the names of the devices the plugin publishes and the static MIG
// devices among them.
func (p *Plugin) indexDevices() error {
	devs, err := p.builder.Devices(p.inv)
	if err != nil {
		return fmt.Errorf("build devices: %w", err)
	}
	migByUUID := map[string]*gpu.MIGDevice{}
	for i := range p.inv.GPUs {
		for j := range p.inv.GPUs[i].MIGDevices {
			m := &p.inv.GPUs[i].MIGDevices[j]
			migByUUID[m.UUID] = m
		}
	}
	p.published = make([]string, 0, len(devs))
	for _, d := range devs {
		p.published = append(p.published, d.Name)
		if t := d.Attributes[AttrType]; t.StringValue == nil || *t.StringValue != DeviceTypeMIG {
			continue
		}
		if u := d.Attributes[AttrUUID]; u.StringValue != nil {
			if m, ok := migByUUID[*u.StringValue]; ok {
				p.static[d.Name] = m
			}
		}
	}
	return nil
}

// DriverName returns the DRA driver name the plugin serves.
func (p *Plugin) DriverName() string { return p.driverName }

// Inventory returns the GPUs the plugin manages, as enumerated at construction.
func (p *Plugin) Inventory() *gpu.Inventory { return p.inv }

// CheckpointReport returns what opening the checkpoint found (corruption, reboot, migration).
func (p *Plugin) CheckpointReport() checkpoint.LoadReport { return p.loadReport }

// Resources returns the ResourceSlices content the plugin publishes now: the inventory's
// devices, with health taints.
func (p *Plugin) Resources() (*resourceslice.DriverResources, error) {
	return p.builder.Build(p.nodeName, p.inv)
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. Claims are prepared concurrently;
// each gets its own result, so one failing claim does not fail the others.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, claim := range claims {
		wg.Go(func() {
			res := p.prepareClaim(ctx, claim)
			mu.Lock()
			out[claim.UID] = res
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Unknown claims succeed.
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, claim := range claims {
		wg.Go(func() {
			err := p.unprepareClaim(ctx, claim)
			mu.Lock()
			out[claim.UID] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: background errors of the kubelet-plugin
// helper (ResourceSlice publishing, health streams) are logged; they are all retried by the
// helper or by the next event.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	logger := klog.FromContext(ctx)
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		logger.Info("Recoverable kubelet-plugin error", "msg", msg, "err", err)
		return
	}
	logger.Error(err, msg)
}

// StartConfig configures Start.
type StartConfig struct {
	// KubeClient talks to the API server (required). The kubelet-plugin helper GETs every
	// claim before prepare: give it a client without a low QPS limit (rest.Config QPS -1 or a
	// high value), or a burst of pods waits on the client-side rate limiter.
	KubeClient kubernetes.Interface
	// RegistrarDir is where kubelet looks for plugin registration sockets
	// (default kubeletplugin.KubeletRegistryDir).
	RegistrarDir string
	// PluginDir is the plugin's own directory for its DRA socket (default
	// kubeletplugin.KubeletPluginsDir/<driver>). It must exist.
	PluginDir string
	// RollingUpdatePodUID, when set, enables the kubelet's rolling-update support (the pod's
	// UID from the downward API); two plugin pods then briefly serve the same node.
	RollingUpdatePodUID types.UID
	// NoPublish leaves ResourceSlice publishing to the caller.
	NoPublish bool
	// NoHealthMonitor does not watch NVML events (health can still be set with MarkUnhealthy).
	NoHealthMonitor bool
	// Options are extra kubeletplugin options, applied after the plugin's own.
	Options []kubeletplugin.Option
}

// Start reconciles the node (Reconcile), starts the kubelet plugin's gRPC servers
// (kubeletplugin.Start with Serialize(false): the plugin locks per physical GPU itself),
// publishes the ResourceSlices, and starts the health monitor. It returns once the plugin
// serves; Stop (or cancelling ctx for the background work) ends it.
func (p *Plugin) Start(ctx context.Context, sc StartConfig) (*ReconcileReport, error) {
	if sc.KubeClient == nil {
		return nil, errors.New("start plugin: KubeClient is required")
	}
	logger := klog.FromContext(ctx)
	report, err := p.Reconcile(ctx)
	if err != nil {
		// A partial reconciliation is logged and retried by the next start; serving the
		// claims that are fine beats a crash loop.
		logger.Error(err, "Reconciliation at start left work undone")
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(p.driverName),
		kubeletplugin.NodeName(p.nodeName),
		kubeletplugin.KubeClient(sc.KubeClient),
		kubeletplugin.Serialize(false),
	}
	if sc.RegistrarDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(sc.RegistrarDir))
	}
	if sc.PluginDir != "" {
		opts = append(opts, kubeletplugin.PluginDataDirectoryPath(sc.PluginDir))
	}
	if sc.RollingUpdatePodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(sc.RollingUpdatePodUID))
	}
	opts = append(opts, sc.Options...)
	helper, err := kubeletplugin.Start(ctx, p, opts...)
	if err != nil {
		return report, fmt.Errorf("start kubelet plugin %s: %w", p.driverName, err)
	}
	p.helperMu.Lock()
	p.helper = helper
	p.helperMu.Unlock()
	if !sc.NoPublish {
		if err := p.Publish(ctx); err != nil {
			helper.Stop()
			return report, err
		}
	}
	if !sc.NoHealthMonitor && p.lib != nil && !p.health.cfg.Disabled {
		p.health.startMonitor(ctx)
	}
	return report, nil
}

// Publish (re)publishes the plugin's ResourceSlices through the kubelet-plugin helper, with
// the current health taints. It is called by Start and whenever health changes.
func (p *Plugin) Publish(ctx context.Context) error {
	p.helperMu.Lock()
	helper := p.helper
	p.helperMu.Unlock()
	if helper == nil {
		return nil
	}
	res, err := p.Resources()
	if err != nil {
		return fmt.Errorf("build ResourceSlices: %w", err)
	}
	if err := helper.PublishResources(ctx, *res); err != nil {
		return fmt.Errorf("publish ResourceSlices: %w", err)
	}
	return nil
}

// Helper returns the kubelet-plugin helper once Start succeeded, nil before.
func (p *Plugin) Helper() *kubeletplugin.Helper {
	p.helperMu.Lock()
	defer p.helperMu.Unlock()
	return p.helper
}

// Stop stops the gRPC servers and the health monitor. Prepared claims stay prepared.
func (p *Plugin) Stop() {
	p.health.stop()
	p.helperMu.Lock()
	helper := p.helper
	p.helper = nil
	p.helperMu.Unlock()
	if helper != nil {
		helper.Stop()
	}
}

// lockGPUs takes the locks of the given physical GPUs in sorted order and returns the unlock.
func (p *Plugin) lockGPUs(uuids []string) func() {
	uuids = slices.Clone(uuids)
	slices.Sort(uuids)
	uuids = slices.Compact(uuids)
	ms := make([]*sync.Mutex, 0, len(uuids))
	p.locksMu.Lock()
	for _, u := range uuids {
		m := p.locks[u]
		if m == nil {
			m = &sync.Mutex{}
			p.locks[u] = m
		}
		ms = append(ms, m)
	}
	p.locksMu.Unlock()
	for _, m := range ms {
		m.Lock()
	}
	return func() {
		for i := len(ms) - 1; i >= 0; i-- {
			ms[i].Unlock()
		}
	}
}

// step reports a finished step to the AfterStep hook.
func (p *Plugin) step(s PluginStep, uid types.UID) error {
	if p.afterStep == nil {
		return nil
	}
	return p.afterStep(s, uid)
}

// gpuForDevice finds the physical GPU of a DRA device name of this node.
func (p *Plugin) gpuForDevice(name string) (*gpu.GPU, error) {
	minor := -1
	if rest, ok := strings.CutPrefix(name, "gpu-"); ok && !strings.Contains(rest, "-") {
		if n, err := strconv.Atoi(rest); err == nil {
			minor = n
		}
	} else if mn, err := ParseMIGDeviceName(name); err == nil {
		minor = mn.ParentMinor
	}
	if minor < 0 {
		return nil, fmt.Errorf("unknown device %q: not a GPU or MIG device name of this driver", name)
	}
	g, ok := p.gpusByMinor[minor]
	if !ok {
		return nil, fmt.Errorf("unknown device %q: no GPU with minor %d on this node", name, minor)
	}
	return g, nil
}
