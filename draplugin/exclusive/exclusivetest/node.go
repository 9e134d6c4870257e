package exclusivetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/resourcepool"
	"github.com/gpudra/gpudra/simulate"
)

// DefaultNodeName is the name of a Node unless WithNodeName says otherwise.
const DefaultNodeName = "node-1"

// Node is one fake node's directories and boot ID. Plugins built by NewPlugin on the same Node
// share them, as a restarted plugin process shares the node with the one that crashed. A Node
// is safe for concurrent use except Reboot.
type Node struct {
	// Name is the node name, which is also the pool name.
	Name string
	// Dir holds everything below.
	Dir string
	// StateDir is the plugin's state directory (checkpoint and lock files).
	StateDir string
	// CDIDir is the CDI spec directory (/var/run/cdi on a real node).
	CDIDir string
	// PluginDir is the plugin's directory for its DRA socket
	// (/var/lib/kubelet/plugins/<driver> on a real node).
	PluginDir string
	// RegistrarDir is kubelet's plugin registration directory
	// (/var/lib/kubelet/plugins_registry on a real node).
	RegistrarDir string
	// BootIDPath is the file the plugin reads the boot ID from.
	BootIDPath string

	ownDir bool
	boot   int

	mu  sync.Mutex
	sim map[string]*simulate.Simulator // by driver name
}

// NodeOption configures NewNode.
type NodeOption func(*Node)

// WithNodeName names the node (default DefaultNodeName).
func WithNodeName(name string) NodeOption { return func(n *Node) { n.Name = name } }

// WithDir puts the node's files under dir, which the caller owns (Close leaves it). A Node
// built again on the same directory, in another process say, sees the node as it was: the same
// state, specs and boot. The default is a new temporary directory with a short path, as unix
// socket paths must be short (108 bytes).
func WithDir(dir string) NodeOption { return func(n *Node) { n.Dir = dir } }

// NewNode builds a node and creates its directories. Close removes its files.
func NewNode(opts ...NodeOption) (*Node, error) {
	n := &Node{Name: DefaultNodeName, sim: map[string]*simulate.Simulator{}}
	for _, o := range opts {
		o(n)
	}
	if n.Dir == "" {
		dir, err := os.MkdirTemp("", "ex")
		if err != nil {
			return nil, err
		}
		n.Dir, n.ownDir = dir, true
	}
	n.StateDir, n.CDIDir = filepath.Join(n.Dir, "state"), filepath.Join(n.Dir, "cdi")
	n.PluginDir, n.RegistrarDir = filepath.Join(n.Dir, "p"), filepath.Join(n.Dir, "r")
	n.BootIDPath = filepath.Join(n.Dir, "boot_id")
	err := n.mkdirs()
	if _, statErr := os.Stat(n.BootIDPath); err == nil && errors.Is(statErr, os.ErrNotExist) {
		err = n.newBootID()
	}
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) mkdirs() error {
	for _, d := range []string{n.StateDir, n.CDIDir, n.PluginDir, n.RegistrarDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) newBootID() error {
	n.boot++
	return os.WriteFile(n.BootIDPath, fmt.Appendf(nil, "boot-%d-%d\n", n.boot, time.Now().UnixNano()), 0o600)
}

// Close removes the node's files (unless WithDir gave the directory).
func (n *Node) Close() error {
	if n.ownDir {
		return os.RemoveAll(n.Dir)
	}
	return nil
}

// Reboot simulates a reboot of the node: a new boot ID and an empty CDI directory, as with a
// tmpfs /var/run/cdi. The state directory survives. What the driver keeps on the node (its
// devices' state) is the test's to reset.
func (n *Node) Reboot() error {
	if err := os.RemoveAll(n.CDIDir); err != nil {
		return err
	}
	if err := n.mkdirs(); err != nil {
		return err
	}
	return n.newBootID()
}

// Config completes cfg with the node's: NodeName, StateDir, BootIDPath, and a CDIWriter on
// CDIDir of kind "<DriverName>/claim", each only when cfg leaves it empty. DriverName and
// Driver are the test's.
func (n *Node) Config(cfg exclusive.Config) (exclusive.Config, error) {
	cfg.NodeName = cmp.Or(cfg.NodeName, n.Name)
	cfg.StateDir = cmp.Or(cfg.StateDir, n.StateDir)
	cfg.BootIDPath = cmp.Or(cfg.BootIDPath, n.BootIDPath)
	if cfg.CDIWriter == nil {
		w, err := cdi.NewWriter(cdi.WithSpecDir(n.CDIDir), cdi.WithWriterKind(cfg.DriverName, "claim"))
		if err != nil {
			return exclusive.Config{}, err
		}
		cfg.CDIWriter = w
	}
	return cfg, nil
}

// NewPlugin starts a plugin "process" on the node: exclusive.New with cfg completed by Config.
// It does not reconcile; call Reconcile (or Serve) as a driver's start would. Close the plugin
// when the test ends (Server.Stop does not).
func (n *Node) NewPlugin(ctx context.Context, cfg exclusive.Config) (*exclusive.Plugin, error) {
	cfg, err := n.Config(cfg)
	if err != nil {
		return nil, err
	}
	return exclusive.New(ctx, cfg)
}

// DeviceClass is the DeviceClass Allocate uses for a driver: named after the driver, it
// selects every device of the driver.
func DeviceClass(driverName string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: driverName}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driverName + `"`}}}}}
}

// Allocate allocates the claim with the Kubernetes scheduler's allocator (package simulate)
// against the ResourceSlices p publishes now, remembering earlier allocations of the node, and
// returns the allocated copy. The claim's requests name DeviceClass(p.DriverName()), the
// driver's name (kubelettest.Claim(name, driverName, selector)).
func (n *Node) Allocate(ctx context.Context, p *exclusive.Plugin, claim *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	pool, err := p.Resources(ctx)
	if err != nil {
		return nil, err
	}
	slices, err := resourcepool.ResourceSlices(p.DriverName(), n.Name, pool)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	sim, ok := n.sim[p.DriverName()]
	if !ok {
		sim = simulate.New(n.Name, []*resourceapi.DeviceClass{DeviceClass(p.DriverName())}, slices)
		n.sim[p.DriverName()] = sim
	} else {
		sim.Publish(slices)
	}
	n.mu.Unlock()
	return sim.Allocate(ctx, claim)
}

// Release gives an allocated claim's devices back to the node's allocator.
func (n *Node) Release(claim *resourceapi.ResourceClaim) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, sim := range n.sim {
		sim.Release(claim)
	}
}

// Specs lists the claim UIDs that have a CDI spec of the driver (kind "<driverName>/claim") on
// the node.
func (n *Node) Specs(driverName string) ([]string, error) {
	w, err := cdi.NewWriter(cdi.WithSpecDir(n.CDIDir), cdi.WithWriterKind(driverName, "claim"))
	if err != nil {
		return nil, err
	}
	return w.List()
}

// nodeObject is the Node object a plugin's Start reads.
func (n *Node) nodeObject() runtime.Object {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: "node-uid"}}
}
