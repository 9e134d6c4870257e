package exclusive

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/crashpoint"
	"github.com/gpudra/gpudra/internal/durability"
	"github.com/gpudra/gpudra/internal/lifecycle"
	"github.com/gpudra/gpudra/internal/locks"
	"github.com/gpudra/gpudra/internal/serving"
	"github.com/gpudra/gpudra/resourcepool"
)

// Plugin is a crash-safe kubelet DRA plugin for exclusively allocated devices of any kind: it
// implements kubeletplugin.DRAPlugin around a Driver. Prepare and unprepare are idempotent,
// serialized per device, recorded in a checkpoint before the driver is called and undone on
// failure; Reconcile repairs what a crash or a reboot left. Build one with New and run it with
// Start.
type Plugin struct {
	driverName, nodeName string
	driver               Driver
	writer               *cdi.Writer
	store                *checkpoint.Store
	checkpoint           CheckpointStatus
	locks                *locks.Locks
	fatal                *lifecycle.Fatal
	slices               []resourcepool.Option
	hooks                testhooks.Hooks

	mu        sync.Mutex
	published map[string]bool // the device names Driver.Devices listed last

	// ops tracks the prepare and unprepare calls under way, for Stop to wait for.
	ops lifecycle.InFlight

	helperMu sync.Mutex
	helper   *kubeletplugin.Helper
	stopped  chan struct{} // closed by Stop: ends the watch for deleted slices
}

var _ kubeletplugin.DRAPlugin = (*Plugin)(nil)

// CheckpointStatus says what opening the checkpoint found.
type CheckpointStatus struct {
	// Path is the checkpoint file.
	Path string
	// Fresh is true when there was no checkpoint: a first start, or the state directory was
	// wiped. Either way (Fresh or Corrupt) the checkpoint is not trusted to say what is not
	// prepared.
	Fresh bool
	// Corrupt is true when a checkpoint existed but could not be used.
	Corrupt bool
	// MovedTo is where the unusable checkpoint was moved, when Corrupt.
	MovedTo string
	// Reason says why the checkpoint was unusable, when Corrupt.
	Reason string
	// Rebooted is true when the checkpoint was last written in another boot.
	Rebooted bool
}

// New builds a plugin from cfg: it opens the checkpoint and lists the driver's devices once. It
// changes nothing on the node: call Reconcile (Start does) before serving.
func New(ctx context.Context, cfg Config) (*Plugin, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Plugin{driverName: cfg.DriverName, nodeName: cfg.NodeName, driver: cfg.Driver, writer: cfg.CDIWriter,
		fatal: lifecycle.NewFatal(), slices: cfg.PoolOptions, hooks: cfg.TestHooks}
	if _, err := p.Resources(ctx); err != nil {
		return nil, err
	}
	var err error
	if p.locks, err = locks.NewLocks(cfg.StateDir); err != nil {
		return nil, err
	}
	store, rep, err := durability.OpenStore(ctx, durability.StoreConfig{Dir: cfg.StateDir, BootIDPath: cfg.BootIDPath, Now: cfg.Now,
		Synced: cfg.TestHooks.Synced, BeforeWrite: cfg.TestHooks.CheckpointWrite})
	if err != nil {
		return nil, errors.Join(err, p.locks.Close())
	}
	p.store = store
	p.checkpoint = CheckpointStatus{Path: rep.Path, Fresh: rep.Fresh, Corrupt: rep.Corrupt, MovedTo: rep.MovedTo, Rebooted: rep.Rebooted}
	if rep.Reason != nil {
		p.checkpoint.Reason = rep.Reason.Error()
	}
	return p, nil
}

// DriverName returns the DRA driver name the plugin serves.
func (p *Plugin) DriverName() string { return p.driverName }

// Resources lists the driver's devices now and returns the node's pool, chunked into slices
// within the API limits. The devices it lists are the ones prepare accepts.
func (p *Plugin) Resources(ctx context.Context) (*resourcepool.Pool, error) {
	devices, err := p.driver.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the driver's devices: %w", err)
	}
	if err := resourcepool.ValidateDevices(devices); err != nil {
		return nil, fmt.Errorf("the driver's devices: %w", err)
	}
	pool, err := resourcepool.New(p.nodeName, devices, p.slices...)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(devices))
	for _, d := range devices {
		names[d.Name] = true
	}
	p.mu.Lock()
	p.published = names
	p.mu.Unlock()
	return pool, nil
}

// isPublished says whether the driver listed the device last time.
func (p *Plugin) isPublished(device string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published[device]
}

// Start reconciles the node (Reconcile), starts the kubelet plugin's gRPC servers and
// registration (kubeletplugin.Start) and publishes the node's ResourceSlices (on a node with
// none of the driver's, it creates the first ones itself, a second sooner than the helper's
// ResourceSlice controller would, and the controller takes them over). It returns once
// the plugin serves; Stop ends it. A failed reconciliation is logged, not fatal: what it left is
// retried at the next start, and the claims that are fine are served meanwhile.
func (p *Plugin) Start(ctx context.Context, sc StartConfig) (*ReconcileReport, error) {
	if sc.KubeClient == nil {
		return nil, errors.New("start plugin: KubeClient is required")
	}
	endpoint := serving.Endpoint{
		DriverName: p.driverName, NodeName: p.nodeName, KubeClient: sc.KubeClient, RegistrarDir: sc.RegistrarDir,
		PluginDir: sc.PluginDir, RollingUpdatePodUID: sc.RollingUpdatePodUID, Options: sc.Options}
	if err := serving.CheckSocketPaths(endpoint); err != nil {
		return nil, fmt.Errorf("start plugin: %w", err)
	}
	report, err := p.Reconcile(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reconciliation at start left work undone")
	}
	helper, err := kubeletplugin.Start(ctx, p, serving.HelperOptions(endpoint)...)
	if err != nil {
		return report, fmt.Errorf("start kubelet plugin %s: %w", p.driverName, err)
	}
	stopped := make(chan struct{})
	p.helperMu.Lock()
	p.helper, p.stopped = helper, stopped
	p.helperMu.Unlock()
	if !sc.NoPublish {
		if err := serving.PublishFirst(ctx, helper, sc.KubeClient, p.driverName, p.nodeName, p.Resources); err != nil {
			p.Stop()
			return report, err
		}
		serving.WatchDeletions(ctx, sc.KubeClient, p.driverName, p.nodeName, stopped, func() {
			if err := p.Publish(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Publishing ResourceSlices again after a deletion failed")
			}
		})
	}
	return report, nil
}

// Publish lists the driver's devices again and hands the pool to the kubelet-plugin helper,
// which brings the ResourceSlices in line (and retries API errors itself). Start publishes
// the first time; call it again when the node's devices change. Before Start it does nothing.
func (p *Plugin) Publish(ctx context.Context) error {
	p.helperMu.Lock()
	helper := p.helper
	p.helperMu.Unlock()
	return serving.Publish(ctx, helper, p.Resources)
}

// Stop stops the gRPC servers, then waits for the prepares and unprepares under way to end, so
// that the driver can release its devices' resources afterwards without cutting one short.
// Prepared claims stay prepared.
func (p *Plugin) Stop() {
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

// Close releases the checkpoint and lock files. Call it after Stop when the plugin is not used
// any more; a process that exits need not.
func (p *Plugin) Close() error { return errors.Join(p.store.Close(), p.locks.Close()) }

// HandleError implements kubeletplugin.DRAPlugin: recoverable errors of the kubelet-plugin
// helper are logged; any other closes Done, and the driver should exit and be restarted.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	p.fatal.HandleError(ctx, err, msg)
}

// Done is closed when a fatal error (HandleError) means the plugin must be restarted.
func (p *Plugin) Done() <-chan struct{} { return p.fatal.Done() }

// Err returns the fatal error that closed Done, nil before.
func (p *Plugin) Err() error { return p.fatal.Err() }

// WatchHealthStatus implements kubeletplugin.DRAPlugin: the plugin does not monitor device
// health, which kubelet is told with kubeletplugin.ErrHealthNotSupported.
func (p *Plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// lock takes the locks of the devices and re-reads the checkpoint, which another plugin process
// may have changed while this one did not hold them.
func (p *Plugin) lock(devices []string) (func(), error) {
	unlock, err := p.locks.Lock(devices)
	if err != nil {
		return nil, fmt.Errorf("lock devices: %w", err)
	}
	if err := p.store.Refresh(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// crashPoint reports a crash point to the test hook.
func (p *Plugin) crashPoint(point testhooks.CrashPoint, uid string) error {
	return crashpoint.At(p.hooks, point, types.UID(uid))
}

// ourResults are the claim's allocation results of this driver. A device of this driver in
// another pool, one the driver does not list, or one allocated twice is an error: preparing
// anything for such a claim would give its container the wrong device or none.
func (p *Plugin) ourResults(claim *resourceapi.ResourceClaim) ([]resourceapi.DeviceRequestAllocationResult, error) {
	if claim.Status.Allocation == nil {
		return nil, errors.New("the claim is not allocated")
	}
	var ours []resourceapi.DeviceRequestAllocationResult
	seen := map[string]string{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != p.driverName {
			continue
		}
		switch req, dup := seen[r.Device]; {
		case r.Pool != p.nodeName:
			return nil, fmt.Errorf("device %s: it is in pool %q, but this plugin serves pool %q of node %s: the claim was allocated on another node", r.Device, r.Pool, p.nodeName, p.nodeName)
		case !p.isPublished(r.Device):
			return nil, fmt.Errorf("device %s: the driver does not list it on node %s", r.Device, p.nodeName)
		case dup:
			return nil, fmt.Errorf("device %s: allocated for requests %q and %q: an exclusive device serves one request", r.Device, req, r.Request)
		}
		seen[r.Device] = r.Request
		ours = append(ours, r)
	}
	return ours, nil
}
