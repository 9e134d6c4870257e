package draplugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/vfio"
)

// Config configures New. NodeName, StateDir, CDIGenerator, CDIWriter and one of NVML or
// Inventory are required; everything else has a production default.
type Config struct {
	// NodeName is the node the plugin runs on; its pool carries the same name.
	NodeName string
	// SliceOptions are the options of the ResourceSlice builder (gpudra.NewBuilder). They are the
	// single source of what the plugin publishes and prepares: driver name (WithDriverName),
	// dynamic MIG (WithDynamicMIG), consumable memory, PCIe roots, slice size and taints. The
	// plugin adds its health taints to any WithDeviceTaints given here.
	SliceOptions []gpudra.Option
	// APIFeatures, when set, are the optional ResourceSlice features the API server keeps, as
	// NegotiateFeatures found them: the plugin publishes no field of the others
	// (gpudra.WithoutFeatures), whatever SliceOptions asks, and logs once what it turned off and why.
	// Nil publishes what SliceOptions asks for.
	APIFeatures *APIFeatures
	// NVML is an initialized NVML ((*nvmlgpu.Session).Interface(), or a gpu/gputest machine). It is
	// used to enumerate GPUs when Inventory is nil, by the default MIG controller, and for health
	// events. The caller owns Init and Shutdown.
	NVML nvml.Interface
	// Inventory is the node's GPUs; when nil it is enumerated from NVML by New.
	Inventory *gpu.Inventory
	// RequireAllGPUs makes New fail when any GPU fails to enumerate. By default such a GPU is
	// left out (nvmlgpu.SkipFailedGPUs): it is logged and counted (MetricGPUEnumerationFailures),
	// the rest of the node serves, and claims prepared on it are kept, not forgotten, until it
	// can be read again.
	RequireAllGPUs bool
	// StateDir holds the checkpoint and the record of MIG instances that existed before the
	// plugin first ran in the current boot. Use a persistent directory, for example
	// /var/lib/kubelet/plugins/<driver>.
	StateDir string
	// BootIDPath is where the kernel boot ID is read (default /proc/sys/kernel/random/boot_id).
	// Claims recorded in another boot lost what a reboot erases.
	BootIDPath string
	// CDIGenerator generates the per-claim CDI specs.
	CDIGenerator *cdi.Generator
	// CDIWriter stores the per-claim CDI specs (in the container runtime's spec directory).
	CDIWriter *cdi.Writer
	// Sharing resolves opaque configs and applies sharing strategies; default a
	// sharing.Manager for the driver without host interfaces, which prepares exclusive devices
	// and fails time-slicing and MPS with an error naming the missing option.
	Sharing SharingEngine
	// MIG creates and destroys MIG instances of dynamic MIG devices; default an NVML
	// controller (NewNVMLMIGController) when NVML is set.
	MIG MIGController
	// Passthrough binds the GPUs of claims for vfio devices (published with
	// gpudra.WithPassthrough in SliceOptions) to vfio-pci and back; vfio.NewSysfsBinder is the
	// implementation. It is required when SliceOptions publish vfio devices, and ignored
	// otherwise except to unbind GPUs the checkpoint records as bound.
	Passthrough vfio.Binder
	// Health configures health monitoring.
	Health HealthConfig
	// Metrics is where the plugin registers its Prometheus metrics; nil registers nothing
	// (the global default registry is never used).
	Metrics prometheus.Registerer
	// SuperviseInterval is how often, while serving, the MPS daemons of prepared claims are
	// checked and restarted when they died, and unused MPS directories removed (default 1m;
	// negative: never, only at start).
	SuperviseInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// TestHooks are for tests only (crash injection, fsync accounting, failed checkpoint
	// writes; package draplugin/testhooks); production drivers
	// leave them empty.
	TestHooks testhooks.Hooks
}

// HealthConfig configures health monitoring.
type HealthConfig struct {
	// Disabled turns monitoring off: no NVML events are watched and WatchHealthStatus returns
	// kubeletplugin.ErrHealthNotSupported.
	Disabled bool
	// IgnoredXIDs are XIDs that do not taint a GPU; nil means DefaultIgnoredXIDs. Use an empty,
	// non-nil slice to treat every XID as fatal.
	IgnoredXIDs []uint64
	// TaintKey is the key of the taint put on the devices of an unhealthy GPU
	// (default "<driver name>/unhealthy"); its value says why ("xid-79", "gpu-lost").
	TaintKey string
	// ReportInterval is how often WatchHealthStatus resends the full report even without a
	// change (default 10s); each report tells the kubelet to wait three intervals for the next.
	ReportInterval time.Duration
	// EventWait is how long one NVML event wait blocks (default 1s); it bounds how long
	// stopping the monitor takes and how often recovery is checked.
	EventWait time.Duration
	// TaintEffect is the effect of health taints: NoSchedule (default) keeps new claims off an
	// unhealthy device, NoExecute also evicts the pods that use it, None only informs.
	TaintEffect resourceapi.DeviceTaintEffect
	// RecoveryWindow is how long a GPU or MIG device tainted by NVML events (XID, ECC) must stay
	// quiet before its taint is removed (default DefaultRecoveryWindow). A negative window keeps
	// those taints until MarkHealthy. A lost GPU recovers as soon as it answers NVML again;
	// taints set with MarkUnhealthy are removed only by MarkHealthy.
	RecoveryWindow time.Duration
}

// DefaultRecoveryWindow is how long a device tainted by NVML events must stay quiet before the
// taint is removed, unless HealthConfig.RecoveryWindow says otherwise.
const DefaultRecoveryWindow = 5 * time.Minute

// validate checks the health settings.
func (c HealthConfig) validate() error {
	switch c.TaintEffect {
	case "", resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone:
		return nil
	}
	return fmt.Errorf("Health.TaintEffect %q: supported values: %q, %q, %q", c.TaintEffect,
		resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone)
}

// DefaultIgnoredXIDs are the XIDs that do not make a GPU unhealthy: they report application
// errors (13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
// 45 preemptive cleanup, 68 video processor exception) or a benign driver event (109 context
// switch timeout recovery), not a broken GPU. NVIDIA's device plugin and DRA driver skip the
// same list.
func DefaultIgnoredXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

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
	// NoDeviceStatus does not write status.devices of the claims the plugin prepares. By
	// default each prepared device is described there (DeviceStatusData, condition Prepared)
	// with server-side apply under the driver's name as field manager, in the background; this
	// needs the "patch" verb on resourceclaims/status.
	NoDeviceStatus bool
	// Options are extra kubeletplugin options, applied after the plugin's own.
	Options []kubeletplugin.Option
}

// CheckpointStatus says what opening the checkpoint found.
type CheckpointStatus struct {
	// Path is the checkpoint file.
	Path string
	// Fresh is true when there was no checkpoint: a first start, or the state directory was
	// wiped.
	Fresh bool
	// Corrupt is true when a checkpoint existed but could not be used; it was moved to MovedTo
	// and Reason says why.
	Corrupt bool
	// MovedTo is where a corrupt checkpoint was moved ("" when not Corrupt).
	MovedTo string
	// Reason is why a corrupt checkpoint could not be used ("" when not Corrupt).
	Reason string
	// Migrated is the schema version the checkpoint was migrated from, 0 when none was needed.
	Migrated int
	// Rebooted is true when the checkpoint was last written in another boot.
	Rebooted bool
	// BootID is the current boot ID.
	BootID string
}

func (c *Config) validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("plugin config: NodeName is required")
	case c.StateDir == "":
		return errors.New("plugin config: StateDir is required (a persistent directory for the checkpoint)")
	case c.CDIGenerator == nil || c.CDIWriter == nil:
		return errors.New("plugin config: CDIGenerator and CDIWriter are required")
	case c.NVML == nil && c.Inventory == nil:
		return errors.New("plugin config: NVML or Inventory is required")
	case c.CDIGenerator.Kind() != c.CDIWriter.Kind():
		return fmt.Errorf("plugin config: the CDI generator makes specs of kind %s but the writer stores kind %s (cdi.WithKind and cdi.WithWriterKind must agree)",
			c.CDIGenerator.Kind(), c.CDIWriter.Kind())
	}
	if gpudra.NewBuilder(c.SliceOptions...).Passthrough() != nil && c.Passthrough == nil {
		return errors.New("plugin config: SliceOptions publish GPUs for passthrough (gpudra.WithPassthrough) but Passthrough is nil: set it to a vfio.Binder (vfio.NewSysfsBinder)")
	}
	if err := c.Health.validate(); err != nil {
		return fmt.Errorf("plugin config: %w", err)
	}
	return nil
}

// inventory returns the configured inventory or enumerates one.
func (c *Config) inventory(ctx context.Context) (*gpu.Inventory, error) {
	if c.Inventory != nil {
		return c.Inventory, nil
	}
	return nvmlgpu.Enumerate(ctx, c.NVML, nvmlgpu.SkipFailedGPUs(!c.RequireAllGPUs))
}
