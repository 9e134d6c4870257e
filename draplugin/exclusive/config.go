package exclusive

import (
	"context"
	"errors"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/resourcepool"
)

// Driver is what the author of a driver for exclusively allocated devices writes; the Plugin
// does everything else. The Plugin calls Prepare and Unprepare with the device's lock held, in
// this process and across the two plugin processes of a rolling update, so calls for one device
// never overlap; calls for different devices run in parallel.
type Driver interface {
	// Devices lists the node's devices, in publishing order. Names must be DNS labels, unique on
	// the node and stable across restarts: checkpoint entries and CDI specs name devices by them.
	Devices(ctx context.Context) ([]resourceapi.Device, error)
	// Prepare readies one device for a claim and returns the container edits that give a
	// container the device (its device node, environment variables, mounts). It may be called
	// again for the same claim and device after a crash or a failed attempt.
	Prepare(ctx context.Context, claim *resourceapi.ResourceClaim, device string) (specs.ContainerEdits, error)
	// Unprepare undoes Prepare of the device for the claim. It is called for every device whose
	// Prepare may have run: after a successful one, after a failed or interrupted one, and for
	// claims of an earlier boot. It must succeed when there is nothing to undo, and must not
	// undo what Prepare did for another claim.
	Unprepare(ctx context.Context, claimUID types.UID, device string) error
}

// Config configures New. Every field but BootIDPath, PoolOptions, Now and TestHooks is required.
type Config struct {
	// DriverName is the DRA driver name, a DNS subdomain (accel.example.com); it is also the
	// attribute domain of the driver's devices.
	DriverName string
	// NodeName is the node the plugin runs on; its pool carries the same name.
	NodeName string
	// Driver is the author's half of the driver.
	Driver Driver
	// StateDir holds the checkpoint and the per-device lock files. Use a persistent directory,
	// for example /var/lib/kubelet/plugins/<driver>.
	StateDir string
	// CDIWriter stores the per-claim CDI specs; its kind (cdi.WithWriterKind) is the specs'.
	CDIWriter *cdi.Writer
	// BootIDPath is where the kernel boot ID is read (default /proc/sys/kernel/random/boot_id):
	// claims prepared in another boot are unprepared by Reconcile.
	BootIDPath string
	// PoolOptions are options of the node's pool (resourcepool.WithMaxDevicesPerSlice).
	PoolOptions []resourcepool.Option
	// Now is the clock (default time.Now).
	Now func() time.Time
	// TestHooks are for tests only (crash injection, fsync accounting, failed checkpoint
	// writes; package draplugin/testhooks); production drivers leave them empty.
	TestHooks testhooks.Hooks
}

func (c *Config) validate() error {
	switch {
	case c.Driver == nil:
		return errors.New("exclusive plugin config: Driver is required")
	case c.StateDir == "":
		return errors.New("exclusive plugin config: StateDir is required (a persistent directory for the checkpoint)")
	case c.CDIWriter == nil:
		return errors.New("exclusive plugin config: CDIWriter is required")
	}
	if err := resourcepool.ValidateDriverName(c.DriverName); err != nil {
		return fmt.Errorf("exclusive plugin config: %w", err)
	}
	if err := resourcepool.ValidateNodeName(c.NodeName); err != nil {
		return fmt.Errorf("exclusive plugin config: %w", err)
	}
	return nil
}

// StartConfig configures Start.
type StartConfig struct {
	// KubeClient talks to the API server (required). Give it a client without a low QPS limit:
	// the kubelet-plugin helper GETs every claim before prepare.
	KubeClient kubernetes.Interface
	// RegistrarDir is where kubelet looks for plugin registration sockets
	// (default kubeletplugin.KubeletRegistryDir).
	RegistrarDir string
	// PluginDir is the plugin's directory for its DRA socket (default
	// kubeletplugin.KubeletPluginsDir/<driver>). It must exist.
	PluginDir string
	// RollingUpdatePodUID, when set, enables kubelet's rolling-update support (the pod's UID
	// from the downward API).
	RollingUpdatePodUID types.UID
	// NoPublish leaves ResourceSlice publishing to the caller (Resources).
	NoPublish bool
	// Options are extra kubeletplugin options, applied after the plugin's own.
	Options []kubeletplugin.Option
}
