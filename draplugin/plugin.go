package draplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/crashpoint"
	"github.com/gpudra/gpudra/internal/durability"
	"github.com/gpudra/gpudra/internal/lifecycle"
	"github.com/gpudra/gpudra/internal/locks"
	"github.com/gpudra/gpudra/internal/serving"
	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/vfio"
)

// Plugin is a crash-safe kubelet DRA plugin for NVIDIA GPUs: it implements
// kubeletplugin.DRAPlugin. Prepare and unprepare are idempotent, serialized per physical GPU
// (claims on different GPUs run in parallel), recorded in a checkpoint before and after every
// side effect, and undone exactly on failure; Reconcile repairs what a crash or a reboot left.
// Health events become device taints and health reports. Build one with New and run it with
// Start.
type Plugin struct {
	driverName string
	nodeName   string
	lib        nvml.Interface
	inv        *gpu.Inventory
	store      *checkpoint.Store
	checkpoint CheckpointStatus
	stateDir   string
	files      *atomicfile.Files // the state directory's files besides the checkpoint
	gen        *cdi.Generator
	writer     *cdi.Writer
	sharing    SharingEngine
	mig        MIGController
	binder     vfio.Binder
	builder    *gpudra.Builder
	sliceOpts  []gpudra.Option // the builder's options, for the builds that publish
	hooks      testhooks.Hooks
	now        func() time.Time
	supervise  time.Duration
	metrics    *metrics
	health     *health
	devices    *deviceIndex

	locks *locks.Locks // per physical GPU, by UUID

	// synced records, per GPU, the checkpoint reload count at which the sharing engine's
	// registry was last synced for it (see syncSharing).
	syncMu sync.Mutex
	synced map[string]uint64

	// ops tracks the operations that change the node (prepare, unprepare, a round of MPS
	// supervision), for Stop to wait for.
	ops lifecycle.InFlight

	helperMu sync.Mutex
	helper   *kubeletplugin.Helper
	stopped  chan struct{} // closed by Stop; the background loops of Start end

	// republishReq asks the publisher (Start) to build and publish the slices again.
	republishReq chan struct{}
	// status writes claims' status.devices; nil unless Start runs it.
	status *statusWriter

	fatal *lifecycle.Fatal // the kubelet-plugin helper's fatal error
}

var _ kubeletplugin.DRAPlugin = (*Plugin)(nil)

// New builds a plugin from cfg and opens its checkpoint. It does not touch hardware or files
// beyond the checkpoint: call Reconcile (Start does) before serving.
func New(ctx context.Context, cfg Config) (*Plugin, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	inv, err := cfg.inventory(ctx)
	if err != nil {
		return nil, fmt.Errorf("enumerate GPUs: %w", err)
	}
	p := &Plugin{
		nodeName: cfg.NodeName, lib: cfg.NVML, inv: inv, stateDir: cfg.StateDir,
		gen: cfg.CDIGenerator, writer: cfg.CDIWriter, sharing: cfg.Sharing, mig: cfg.MIG, binder: cfg.Passthrough,
		hooks: cfg.TestHooks, now: cfg.Now, fatal: lifecycle.NewFatal(), supervise: cfg.SuperviseInterval,
		synced: map[string]uint64{}, republishReq: make(chan struct{}, 1),
		files: atomicfile.New(atomicfile.WithSyncer(syncer(cfg.TestHooks))),
	}
	if p.supervise == 0 {
		p.supervise = time.Minute
	}
	if p.now == nil {
		p.now = time.Now
	}
	// The health taints need the device index, which needs the builder: build it once without
	// them to learn the driver name and devices, then with them.
	p.driverName = gpudra.NewBuilder(cfg.SliceOptions...).DriverName()
	p.health = newHealth(cfg.Health, p.driverName, p.now)
	p.sliceOpts = sliceOptions(klog.FromContext(ctx), cfg, p.health.taints)
	p.builder = gpudra.NewBuilder(p.sliceOpts...)
	if p.devices, err = newDeviceIndex(p.builder, inv); err != nil {
		return nil, err
	}
	p.health.attach(p.devices, p.migDevicesOf, p.onHealthChange)
	if p.sharing == nil {
		p.sharing = sharing.NewManager(p.driverName)
	}
	if lookup := p.builder.DynamicMIG(); p.mig == nil && cfg.NVML != nil && lookup != nil {
		p.mig = NewNVMLMIGController(cfg.NVML, deviceModels(inv, lookup))
	}
	if p.mig != nil {
		p.mig = &republishingMIG{MIGController: p.mig, changed: p.republish}
	}
	logCatalogDifferences(klog.FromContext(ctx), inv)
	logEnumerationFailures(klog.FromContext(ctx), inv)
	if p.locks, err = locks.NewLocks(p.stateDir); err != nil {
		return nil, err
	}
	if err := p.openCheckpoint(ctx, cfg.BootIDPath); err != nil {
		return nil, err
	}
	if err := p.restoreBound(ctx); err != nil {
		return nil, err
	}
	p.metrics = newMetrics(cfg.Metrics, p.counts, p.health.count, catalogDifferences(inv), inv.Errors)
	p.metrics.countCheckpoint(p.checkpoint)
	return p, nil
}

func (p *Plugin) openCheckpoint(ctx context.Context, bootIDPath string) error {
	store, rep, err := durability.OpenStore(ctx, durability.StoreConfig{Dir: p.stateDir, BootIDPath: bootIDPath, Now: p.now, Synced: p.hooks.Synced,
		BeforeWrite: p.hooks.CheckpointWrite})
	if err != nil {
		return err
	}
	p.store = store
	p.checkpoint = CheckpointStatus{Path: rep.Path, Fresh: rep.Fresh, Corrupt: rep.Corrupt, MovedTo: rep.MovedTo,
		Migrated: rep.Migrated, Rebooted: rep.Rebooted, BootID: rep.BootID}
	if rep.Reason != nil {
		p.checkpoint.Reason = rep.Reason.Error()
	}
	return nil
}

// dynamicMIG reports whether MIG-capable GPUs are published as dynamic partitions.
func (p *Plugin) dynamicMIG() bool { return p.builder.DynamicMIG() != nil }

// DriverName returns the DRA driver name the plugin serves.
func (p *Plugin) DriverName() string { return p.driverName }

// Inventory returns the GPUs the plugin manages, as enumerated at construction.
func (p *Plugin) Inventory() *gpu.Inventory { return p.inv }

// Resources returns the pool the plugin publishes now: the inventory's devices with their
// health taints. With dynamic MIG, partitions follow the GPUs as they are partitioned now: the
// order adapts to the instances present, and placements beside an instance no claim records
// (another tool's, or one kept after a lost checkpoint) are withdrawn.
func (p *Plugin) Resources(ctx context.Context) (*gpudra.Pool, error) {
	inv, owned, err := p.partitionedNow(ctx)
	if err != nil {
		return nil, err
	}
	b := p.builder
	if owned != nil {
		b = gpudra.NewBuilder(append(slices.Clone(p.sliceOpts), gpudra.WithDynamicMIGOwned(owned))...)
	}
	return b.Build(p.nodeName, inv)
}

// partitionedNow returns the inventory with the MIG instances that exist now on the GPUs
// published as partitions, and which of them claims record (owned); nil owned without dynamic
// MIG. Instances are listed before the checkpoint is read: an instance is recorded before it is
// created, so one that exists is never mistaken for foreign. A GPU whose instances cannot be
// listed now is left out (logged): what could be allocated on it is unknown, and the rest of
// the node is published all the same.
func (p *Plugin) partitionedNow(ctx context.Context) (*gpu.Inventory, func(*gpu.GPU, *gpu.MIGDevice) bool, error) {
	if len(p.devices.partitioned) == 0 || p.mig == nil {
		return p.inv, nil, nil
	}
	inv := *p.inv
	inv.GPUs = make([]gpu.GPU, 0, len(p.inv.GPUs))
	for _, g := range p.inv.GPUs {
		if p.devices.partitioned[g.UUID] {
			insts, err := p.mig.Instances(ctx, g.UUID)
			if err != nil {
				klog.FromContext(ctx).Error(err, "Cannot list the MIG instances of a GPU; it is not published until they can be listed", "gpu", g.UUID, "index", g.Index)
				continue
			}
			g.MIGDevices = instancesAsMIGDevices(&g, insts)
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	if err := p.store.Refresh(); err != nil {
		return nil, nil, err
	}
	referenced := p.referencedPlacements()
	return &inv, func(g *gpu.GPU, d *gpu.MIGDevice) bool { return referenced[placementKey{g.UUID, d.Placement.Start}] }, nil
}

// instancesAsMIGDevices are the MIG devices of g that insts describe.
func instancesAsMIGDevices(g *gpu.GPU, insts []MIGInstance) []gpu.MIGDevice {
	out := make([]gpu.MIGDevice, 0, len(insts))
	for _, in := range insts {
		out = append(out, gpu.MIGDevice{UUID: in.UUID, ParentUUID: g.UUID, ParentIndex: g.Index, ParentMinor: g.Minor,
			Profile: in.Profile, GIProfileID: in.GIProfileID, GIID: in.GIID, CIID: in.CIID, Placement: in.Placement})
	}
	return out
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. Claims are prepared concurrently;
// each gets its own result, so one failing claim does not fail the others.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	defer p.ops.Begin()()
	return serving.Concurrently(claims, func(c *resourceapi.ResourceClaim) types.UID { return c.UID },
		func(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult { return p.prepareClaim(ctx, c) }), nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Unknown claims succeed, once a
// CDI spec left for them (by a prepare that crashed after writing it) is removed. Claims
// are unprepared concurrently. Nothing is fsynced: a power loss reverting the checkpoint to before
// an unprepare is harmless, since Reconcile forgets every claim of an earlier boot.
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	defer p.ops.Begin()()
	return serving.Concurrently(claims, func(c kubeletplugin.NamespacedObject) types.UID { return c.UID },
		func(c kubeletplugin.NamespacedObject) error { return p.unprepareClaim(ctx, c) }), nil
}

// HandleError implements kubeletplugin.DRAPlugin. Recoverable background errors of the
// kubelet-plugin helper (ResourceSlice publishing, health streams) are logged: the helper or the
// next event retries them. Any other error is fatal: the plugin cannot go on serving correctly,
// so Done is closed and Err returns it; the driver should exit and be restarted.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	p.fatal.HandleError(ctx, err, msg)
}

// Done is closed when a fatal error (HandleError) means the plugin must be restarted.
func (p *Plugin) Done() <-chan struct{} { return p.fatal.Done() }

// Err returns the fatal error that closed Done, nil before.
func (p *Plugin) Err() error { return p.fatal.Err() }

// Start reconciles the node (Reconcile), starts the kubelet plugin's gRPC servers
// (kubeletplugin.Start with Serialize(false): the plugin locks per physical GPU itself),
// starts the health monitor and publishes the ResourceSlices. It returns once the plugin
// serves; Stop (or cancelling ctx for the background work) ends it. On a node with no slice of
// the driver it creates the first slices itself, a second sooner than the helper's
// ResourceSlice controller would, and the controller takes them over.
func (p *Plugin) Start(ctx context.Context, sc StartConfig) (*ReconcileReport, error) {
	if sc.KubeClient == nil {
		return nil, errors.New("start plugin: KubeClient is required")
	}
	if err := serving.CheckSocketPaths(p.endpoint(sc)); err != nil {
		return nil, fmt.Errorf("start plugin: %w", err)
	}
	report, err := p.Reconcile(ctx)
	if err != nil {
		// A partial reconciliation is logged and retried by the next start; serving the
		// claims that are fine beats a crash loop.
		klog.FromContext(ctx).Error(err, "Reconciliation at start left work undone")
	}
	stopped := make(chan struct{})
	if !sc.NoDeviceStatus {
		// Before the sockets serve: prepares read p.status without a lock.
		p.status = newStatusWriter(sc.KubeClient, p.driverName, p.now)
		p.status.resync(p.store.List())
		go p.status.run(ctx, stopped)
	}
	helper, err := kubeletplugin.Start(ctx, p, serving.HelperOptions(p.endpoint(sc))...)
	if err != nil {
		close(stopped)
		return report, fmt.Errorf("start kubelet plugin %s: %w", p.driverName, err)
	}
	p.helperMu.Lock()
	p.helper, p.stopped = helper, stopped
	p.helperMu.Unlock()
	// The health monitor starts before the publish, which waits about a second for the helper's
	// ResourceSlice controller after the slices are visible: an XID in that second is not
	// missed, and its taint goes out with the first slices or right after them.
	if !sc.NoHealthMonitor && p.lib != nil && !p.health.cfg.Disabled {
		p.health.startMonitor(ctx, p.lib, p.inv)
	}
	if !sc.NoPublish {
		err := serving.PublishFirst(ctx, helper, sc.KubeClient, p.driverName, p.nodeName, p.Resources)
		p.metrics.published(err)
		if err != nil {
			p.Stop()
			return report, err
		}
		go p.publishLoop(ctx, stopped)
		serving.WatchDeletions(ctx, sc.KubeClient, p.driverName, p.nodeName, stopped, p.republish)
	}
	if p.supervise > 0 {
		go p.superviseLoop(ctx, stopped)
	}
	return report, nil
}

// superviseLoop runs superviseMPS every supervise interval until ctx ends or the plugin stops.
func (p *Plugin) superviseLoop(ctx context.Context, stopped <-chan struct{}) {
	t := time.NewTicker(p.supervise)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.fatal.Done():
			return
		case <-stopped:
			return
		case <-t.C:
		}
		end := p.ops.Begin()
		select {
		case <-stopped: // Stop came while the tick was taken: it waits for no round after it
			end()
			return
		default:
		}
		err := p.superviseMPS(ctx)
		end()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Supervising MPS daemons")
		}
	}
}

// superviseMPS restarts dead MPS daemons of prepared claims and removes unused MPS directories.
// It holds every GPU lock and restores the sharing registry from the checkpoint first, so a
// claim another plugin process (a rolling update) prepared or unprepared meanwhile is seen as
// it is.
func (p *Plugin) superviseMPS(ctx context.Context) error {
	unlock, err := p.lockAll()
	if err != nil {
		return err
	}
	defer unlock()
	rep := &ReconcileReport{}
	if err := p.restoreSharing(ctx, rep); err != nil {
		return err
	}
	err = p.reconcileMPS(ctx, rep)
	if len(rep.MPSRestarted)+len(rep.MPSDirsRemoved) > 0 {
		klog.FromContext(ctx).Info("Supervised MPS daemons", "restarted", rep.MPSRestarted, "removedDirs", rep.MPSDirsRemoved)
	}
	return err
}

func (p *Plugin) endpoint(sc StartConfig) serving.Endpoint {
	return serving.Endpoint{DriverName: p.driverName, NodeName: p.nodeName, KubeClient: sc.KubeClient,
		RegistrarDir: sc.RegistrarDir, PluginDir: sc.PluginDir, RollingUpdatePodUID: sc.RollingUpdatePodUID, Options: sc.Options}
}

// Publish (re)publishes the plugin's ResourceSlices through the kubelet-plugin helper, with
// the current health taints and MIG partitions. Start publishes the first time; afterwards the
// plugin republishes by itself (see Start). Before Start it does nothing; every publish after
// counts in MetricPublish.
func (p *Plugin) Publish(ctx context.Context) error {
	helper := p.Helper()
	if helper == nil {
		return nil
	}
	err := serving.Publish(ctx, helper, p.Resources)
	p.metrics.published(err)
	return err
}

// republish asks for the slices to be published again soon; requests made while one is pending
// are merged into it.
func (p *Plugin) republish() {
	select {
	case p.republishReq <- struct{}{}:
	default:
	}
}

// publishLoop publishes whenever republish asks, until ctx ends or the plugin stops. A failed
// publish is retried with exponential back-off (100ms to 30s) until it succeeds or a newer
// request supersedes it: a change is never dropped.
func (p *Plugin) publishLoop(ctx context.Context, stopped <-chan struct{}) {
	const first, most = 100 * time.Millisecond, 30 * time.Second
	var retry <-chan time.Time
	backoff := first
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.fatal.Done():
			return
		case <-stopped:
			return
		case <-p.republishReq:
		case <-retry:
		}
		if err := p.Publish(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Publishing ResourceSlices failed; retrying", "in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, most)
			continue
		}
		retry, backoff = nil, first
	}
}

// Helper returns the kubelet-plugin helper once Start succeeded, nil before.
func (p *Plugin) Helper() *kubeletplugin.Helper {
	p.helperMu.Lock()
	defer p.helperMu.Unlock()
	return p.helper
}

// Stop stops the gRPC servers and the health monitor, then waits for the prepares, unprepares
// and MPS supervision under way to end (a request whose call was cancelled gives up before it
// changes anything; one that has begun is finished or rolled back), so that the driver can
// release NVML afterwards without cutting one short. Prepared claims stay prepared.
func (p *Plugin) Stop() {
	p.health.stop()
	p.helperMu.Lock()
	helper, stopped := p.helper, p.stopped
	p.helper, p.stopped = nil, nil
	p.helperMu.Unlock()
	if stopped != nil {
		close(stopped)
	}
	if helper != nil {
		helper.Stop()
	}
	p.ops.Wait()
}

// lockGPUs takes the locks of the given physical GPUs (in this process and across processes)
// and re-reads the checkpoint, which another process may have changed while it did not hold
// them. It returns the unlock.
func (p *Plugin) lockGPUs(uuids []string) (func(), error) {
	unlock, err := p.locks.Lock(uuids)
	if err != nil {
		return nil, err
	}
	if err := p.store.Refresh(); err != nil {
		unlock()
		return nil, err
	}
	if err := p.syncSharing(uuids); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// syncSharing brings the sharing engine's registry up to date for the locked GPUs when another
// plugin process (a rolling update) changed the checkpoint since it was last synced for them:
// its claims hold shared host settings this process must not undo, and its unprepared claims
// no longer do.
func (p *Plugin) syncSharing(uuids []string) error {
	gen := p.store.Reloads()
	p.syncMu.Lock()
	var stale []string
	for _, u := range uuids {
		if p.synced[u] != gen {
			stale = append(stale, u)
		}
	}
	p.syncMu.Unlock()
	if len(stale) == 0 {
		return nil
	}
	if err := p.sharing.Sync(p.appliedRecords(), stale); err != nil {
		return fmt.Errorf("sync the sharing registry with the checkpoint: %w", err)
	}
	p.markSynced(stale, gen)
	return nil
}

func (p *Plugin) markSynced(uuids []string, gen uint64) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	for _, u := range uuids {
		p.synced[u] = gen
	}
}

// Close releases the plugin's checkpoint and lock files. Call it after Stop when the plugin is
// not used any more; a process that exits need not.
func (p *Plugin) Close() error {
	return errors.Join(p.store.Close(), p.locks.Close())
}

// crashPoint reports a crash point to the test hook.
func (p *Plugin) crashPoint(point testhooks.CrashPoint, uid types.UID) error {
	return crashpoint.At(p.hooks, point, uid)
}
