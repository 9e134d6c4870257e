package nodeplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/objects"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/resourcepool"
)

// The devices a node in a clique publishes.
const (
	// ChannelDevice is the node's default IMEX channel (type channel, id 0).
	ChannelDevice = objects.ChannelDevice
	// DaemonDevice is the node's IMEX daemon device (type daemon, id 0).
	DaemonDevice = objects.DaemonDevice
)

// Defaults of Config.
const (
	// DefaultReadyTimeout is how long a channel prepare waits for the node's IMEX daemon (and
	// the domain) to be Ready before it fails and leaves the retry to kubelet.
	DefaultReadyTimeout = 20 * time.Second
	// DefaultPollInterval is how often a waiting channel prepare reads the domain again.
	DefaultPollInterval = 500 * time.Millisecond
	// DefaultChannelCount is the number of IMEX channels a claim in AllocationMode All gets
	// (the NVIDIA driver's default channel count).
	DefaultChannelCount = 2048
)

// daemonDirs is the directory under the state directory that holds the daemons' directories.
const daemonDirs = "domains"

// Config configures New. NodeName, StateDir, Fabric, Domains and Channels are required.
type Config struct {
	// NodeName is the node the plugin runs on, also the name of its pool.
	NodeName string
	// StateDir is the plugin's state directory (exclusive.Config.StateDir): it holds the
	// IMEX daemons' directories (domains/<domain UID>/) and the plugin's records of what it
	// prepared. The daemon directories are bind-mounted into daemon containers by the container
	// runtime, so StateDir must be the host's path (mount it at the same path in the plugin's
	// container).
	StateDir string
	// Fabric says which NVLink clique the node's GPUs are in.
	Fabric Fabric
	// Domains looks up the ComputeDomains that channel claims name.
	Domains Domains
	// Channels makes the host's IMEX channel device nodes.
	Channels ChannelDevices
	// ReadyTimeout bounds a channel prepare's wait for the node's IMEX daemon (default
	// DefaultReadyTimeout). Keep it below kubelet's timeout of a prepare call.
	ReadyTimeout time.Duration
	// PollInterval is how often a waiting channel prepare reads the domain (default
	// DefaultPollInterval).
	PollInterval time.Duration
	// ChannelCount is the number of channels of a claim in AllocationMode All (default
	// DefaultChannelCount).
	ChannelCount int
}

func (c *Config) complete() error {
	switch {
	case c.StateDir == "":
		return errors.New("compute-domain node plugin config: StateDir is required")
	case c.Fabric == nil, c.Domains == nil, c.Channels == nil:
		return errors.New("compute-domain node plugin config: Fabric, Domains and Channels are required")
	case c.ReadyTimeout < 0 || c.PollInterval < 0 || c.ChannelCount < 0:
		return fmt.Errorf("compute-domain node plugin config: ReadyTimeout %s, PollInterval %s and ChannelCount %d must not be negative (0 means the default)",
			c.ReadyTimeout, c.PollInterval, c.ChannelCount)
	}
	if err := resourcepool.ValidateNodeName(c.NodeName); err != nil {
		return fmt.Errorf("compute-domain node plugin config: %w", err)
	}
	c.ReadyTimeout = cmp.Or(c.ReadyTimeout, DefaultReadyTimeout)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.ChannelCount = cmp.Or(c.ChannelCount, DefaultChannelCount)
	return nil
}

// Driver is the compute-domain.nvidia.com half of an exclusive kubelet plugin: it publishes the
// node's IMEX channel and daemon devices and prepares them for the claims of ComputeDomains.
// Build one with New and hand it to exclusive.New as Config.Driver.
type Driver struct {
	cfg     Config
	records *records
	// listed is the clique Devices last answered for ("" for none), which WatchFabric compares
	// the fabric with.
	listed listedClique
}

var _ exclusive.Driver = (*Driver)(nil)

// New returns the driver of cfg. It changes nothing on the node.
func New(cfg Config) (*Driver, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	return &Driver{cfg: cfg, records: newRecords(cfg.StateDir)}, nil
}

// Devices implements exclusive.Driver: ChannelDevice and DaemonDevice, with attributes type, id
// and cliqueID, when the node's GPUs put it in an NVLink clique; none otherwise.
func (d *Driver) Devices(ctx context.Context) ([]resourceapi.Device, error) {
	clique, err := d.clique(ctx)
	if errors.Is(err, ErrNoClique) {
		klog.FromContext(ctx).V(1).Info("Publishing no IMEX devices", "reason", err.Error())
		d.listed.set("")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d.listed.set(clique)
	return objects.Devices(clique), nil
}

// clique is the node's NVLink clique now.
func (d *Driver) clique(ctx context.Context) (string, error) {
	gpus, err := d.cfg.Fabric.GPUs(ctx)
	if err != nil {
		return "", err
	}
	return Clique(gpus)
}

// Prepare implements exclusive.Driver.
func (d *Driver) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim, device string) (specs.ContainerEdits, error) {
	switch device {
	case ChannelDevice:
		return d.prepareChannel(ctx, claim)
	case DaemonDevice:
		return d.prepareDaemon(ctx, claim)
	}
	return specs.ContainerEdits{}, fmt.Errorf("device %q is not %s or %s", device, ChannelDevice, DaemonDevice)
}

// Unprepare implements exclusive.Driver: a channel leaves nothing to undo (its device nodes are
// the host's); for the daemon device it removes the directory Prepare recorded, unless another
// claim of the domain holds it, and forgets the record.
func (d *Driver) Unprepare(ctx context.Context, claimUID types.UID, device string) error {
	if device != DaemonDevice {
		return nil
	}
	rec, ok, err := d.records.get(claimUID, device)
	if err != nil || !ok {
		return err
	}
	held, err := d.records.othersHold(claimUID, device, rec.DomainID)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("device", device, "domainUID", rec.DomainID)
	switch {
	case held:
		logger.V(2).Info("Another claim of the domain still holds the IMEX daemon directory; leaving it")
	default:
		if err := os.RemoveAll(d.daemonDir(rec.DomainID)); err != nil {
			return fmt.Errorf("remove the IMEX daemon directory of domain %s: %w", rec.DomainID, err)
		}
	}
	return d.records.remove(claimUID, device)
}

// prepareChannel checks the claim's domain against the node's clique, waits for the node's IMEX
// daemon to be Ready, makes the channel device nodes and returns the edits that give a container
// the channels. It changes nothing in the cluster: the controller labels the node for the domain
// as soon as the claim is allocated here, which brings the daemon.
func (d *Driver) prepareChannel(ctx context.Context, claim *resourceapi.ResourceClaim) (specs.ContainerEdits, error) {
	cfg, err := channelConfig(claim, d.cfg.NodeName)
	if err != nil {
		return specs.ContainerEdits{}, err
	}
	uid := types.UID(cfg.DomainID)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("domainUID", uid))
	dom, err := d.domainInClique(ctx, claim.Namespace, uid)
	if err != nil {
		return specs.ContainerEdits{}, err
	}
	if err := d.waitReady(ctx, dom); err != nil {
		return specs.ContainerEdits{}, err
	}
	channels := []int{0}
	if cfg.AllocationMode == v1beta1.AllocationModeAll {
		channels = make([]int, d.cfg.ChannelCount)
		for i := range channels {
			channels[i] = i
		}
	}
	major, err := d.cfg.Channels.Ensure(ctx, channels)
	if err != nil {
		return specs.ContainerEdits{}, fmt.Errorf("IMEX channel device nodes: %w", err)
	}
	return channelEdits(channels, major), nil
}

// domainInClique looks the domain up and checks that it chose the node's clique.
func (d *Driver) domainInClique(ctx context.Context, namespace string, uid types.UID) (*v1beta1.ComputeDomain, error) {
	clique, err := d.clique(ctx)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", d.cfg.NodeName, err)
	}
	dom, err := d.cfg.Domains.Domain(ctx, namespace, uid)
	if err != nil {
		return nil, err
	}
	switch dom.Status.CliqueID {
	case clique:
		return dom, nil
	case "":
		return nil, fmt.Errorf("ComputeDomain %s (%s) has no clique yet (status.cliqueID is empty): its controller has not chosen one", domainRef(dom), uid)
	default:
		return nil, fmt.Errorf("ComputeDomain %s (%s) is in NVLink clique %s, node %s in %s: the channel can only be prepared on a node of the domain's clique",
			domainRef(dom), uid, dom.Status.CliqueID, d.cfg.NodeName, clique)
	}
}

func domainRef(dom *v1beta1.ComputeDomain) string { return dom.Namespace + "/" + dom.Name }

// waitReady polls the domain until notReady finds nothing missing, for at most ReadyTimeout. dom,
// just read, is the first answer: a ready domain costs no second lookup.
func (d *Driver) waitReady(ctx context.Context, dom *v1beta1.ComputeDomain) error {
	logger := klog.FromContext(ctx)
	reason := notReady(dom, d.cfg.NodeName)
	if reason == "" {
		return nil
	}
	err := wait.PollUntilContextTimeout(ctx, d.cfg.PollInterval, d.cfg.ReadyTimeout, false, func(ctx context.Context) (bool, error) {
		cur, err := d.cfg.Domains.Domain(ctx, dom.Namespace, dom.UID)
		if err != nil {
			// A lookup cut off by the wait's own deadline says nothing about the domain: keep
			// the last reason it was not ready.
			if ctx.Err() == nil {
				reason = err.Error()
			}
			return false, nil
		}
		reason = notReady(cur, d.cfg.NodeName)
		if reason != "" {
			logger.V(3).Info("Waiting for the compute domain", "missing", reason)
		}
		return reason == "", nil
	})
	if err != nil {
		return fmt.Errorf("ComputeDomain %s (%s) is not ready for a channel on node %s after %s: %s; kubelet retries",
			domainRef(dom), dom.UID, d.cfg.NodeName, d.cfg.ReadyTimeout, reason)
	}
	return nil
}

// notReady says what the domain still lacks before a channel of node may be handed out: the
// node's IMEX daemon Ready in status.nodes, and, when spec.numNodes > 0, the domain Ready. ""
// means nothing.
func notReady(dom *v1beta1.ComputeDomain, node string) string {
	i := slices.IndexFunc(dom.Status.Nodes, func(n v1beta1.ComputeDomainNode) bool { return n.Name == node })
	switch {
	case i < 0:
		return fmt.Sprintf("status.nodes has no entry of node %s (its IMEX daemon has not reported yet)", node)
	case dom.Status.Nodes[i].Status != v1beta1.StatusReady:
		return fmt.Sprintf("the IMEX daemon of node %s is %q in status.nodes, not %s", node, dom.Status.Nodes[i].Status, v1beta1.StatusReady)
	case dom.Spec.NumNodes > 0 && dom.Status.Status != v1beta1.StatusReady:
		return fmt.Sprintf("the domain is %q in status.status, not %s (it needs %d nodes with a ready IMEX daemon)", dom.Status.Status, v1beta1.StatusReady, dom.Spec.NumNodes)
	}
	return ""
}

// channelEdits give a container the channels' device nodes and no GPU of its own.
func channelEdits(channels []int, major uint32) specs.ContainerEdits {
	e := specs.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}}
	for _, n := range channels {
		e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: computedomain.ChannelDevicePath(n), Type: "c",
			Major: int64(major), Minor: int64(n)})
	}
	return e
}

// prepareDaemon creates the IMEX daemon's directory of the claim's domain and returns the edits
// that mount it into the daemon container with the domain and the node's clique.
func (d *Driver) prepareDaemon(ctx context.Context, claim *resourceapi.ResourceClaim) (specs.ContainerEdits, error) {
	cfg, err := daemonConfig(claim, d.cfg.NodeName)
	if err != nil {
		return specs.ContainerEdits{}, err
	}
	uid := types.UID(cfg.DomainID)
	clique, err := d.clique(ctx)
	if err != nil {
		return specs.ContainerEdits{}, fmt.Errorf("node %s: %w", d.cfg.NodeName, err)
	}
	if err := d.records.put(claim.UID, DaemonDevice, record{DomainID: uid}); err != nil {
		return specs.ContainerEdits{}, err
	}
	dir := d.daemonDir(uid)
	// Only root on the node and the daemon's container (as root) use the directory.
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return specs.ContainerEdits{}, fmt.Errorf("create the IMEX daemon directories: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return specs.ContainerEdits{}, fmt.Errorf("create the IMEX daemon directory of domain %s: %w", uid, err)
	}
	klog.FromContext(ctx).V(2).Info("Prepared the IMEX daemon directory", "domainUID", uid, "dir", dir)
	return specs.ContainerEdits{
		Env: []string{computedomain.EnvDomainUID + "=" + string(uid), computedomain.EnvCliqueID + "=" + clique, "NVIDIA_VISIBLE_DEVICES=void"},
		Mounts: []*specs.Mount{{HostPath: dir, ContainerPath: computedomain.DaemonConfigDir,
			Options: []string{"rw", "nosuid", "nodev", "bind"}}},
	}, nil
}

// daemonDir is the IMEX daemon directory of a domain, <state dir>/domains/<uid>. uid was
// checked to be a UUID when it was decoded or read from a record.
func (d *Driver) daemonDir(uid types.UID) string {
	return filepath.Join(d.cfg.StateDir, daemonDirs, string(uid))
}
