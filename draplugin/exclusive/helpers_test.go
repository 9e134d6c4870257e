package exclusive_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

const (
	driverName = "accel.example.com"
	nodeName   = "node-1"
)

// fakeDriver is the node side of imaginary accelerators accel-0..accel-<n-1>: Prepare makes a
// device held by the claim (an exclusive device refuses a second holder) and gives the
// container /dev/<device>; Unprepare releases it when the claim holds it. It records every call
// and can be told to fail some.
type fakeDriver struct {
	mu    sync.Mutex
	n     int
	held  map[string]types.UID
	calls []string
	fail  map[string]error // by call, "prepare accel-1"
}

var _ exclusive.Driver = (*fakeDriver)(nil)

func newFakeDriver(n int) *fakeDriver {
	return &fakeDriver{n: n, held: map[string]types.UID{}, fail: map[string]error{}}
}

func (f *fakeDriver) Devices(context.Context) ([]resourceapi.Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]resourceapi.Device, f.n)
	for i := range out {
		out[i].Name = fmt.Sprintf("accel-%d", i)
	}
	return out, nil
}

func (f *fakeDriver) Prepare(_ context.Context, claim *resourceapi.ResourceClaim, device string) (specs.ContainerEdits, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "prepare "+device)
	if err := f.fail["prepare "+device]; err != nil {
		return specs.ContainerEdits{}, err
	}
	if h, ok := f.held[device]; ok && h != claim.UID {
		return specs.ContainerEdits{}, fmt.Errorf("%s is held by claim %s", device, h)
	}
	f.held[device] = claim.UID
	return specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/" + device, Type: "c", Major: 240, Minor: 7}}}, nil
}

func (f *fakeDriver) Unprepare(_ context.Context, uid types.UID, device string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "unprepare "+device)
	if err := f.fail["unprepare "+device]; err != nil {
		return err
	}
	if f.held[device] == uid {
		delete(f.held, device)
	}
	return nil
}

// state returns which claim holds each device and the calls so far, and forgets the calls.
func (f *fakeDriver) state() (map[string]types.UID, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls := f.calls
	f.calls = nil
	return maps.Clone(f.held), calls
}

func (f *fakeDriver) setFail(call string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, call)
		return
	}
	f.fail[call] = err
}

func (f *fakeDriver) setDevices(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n = n
}

// node is one node's directories, boot ID and driver; plugins built on it share them, as a
// restarted plugin process does.
type node struct {
	t                          *testing.T
	stateDir, cdiDir, bootPath string
	writer                     *cdi.Writer
	driver                     *fakeDriver
}

func newNode(t *testing.T, devices int) *node {
	dir := t.TempDir()
	n := &node{t: t, stateDir: filepath.Join(dir, "state"), cdiDir: filepath.Join(dir, "cdi"), bootPath: filepath.Join(dir, "boot_id"),
		driver: newFakeDriver(devices)}
	var err error
	if n.writer, err = cdi.NewWriter(cdi.WithSpecDir(n.cdiDir), cdi.WithWriterKind(driverName, "claim")); err != nil {
		t.Fatal(err)
	}
	n.reboot("boot-1")
	return n
}

// reboot gives the node a new boot ID.
func (n *node) reboot(id string) {
	if err := os.WriteFile(n.bootPath, []byte(id+"\n"), 0o600); err != nil {
		n.t.Fatal(err)
	}
}

// plugin builds a plugin on the node; it is closed when the test ends.
func (n *node) plugin(hooks testhooks.Hooks) *exclusive.Plugin {
	p, err := exclusive.New(context.Background(), exclusive.Config{DriverName: driverName, NodeName: nodeName, Driver: n.driver,
		StateDir: n.stateDir, CDIWriter: n.writer, BootIDPath: n.bootPath, TestHooks: hooks})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = p.Close() })
	return p
}

// restart builds a new plugin on the node, as a restarted process, and reconciles.
func (n *node) restart(old *exclusive.Plugin) (*exclusive.Plugin, *exclusive.ReconcileReport) {
	if old != nil {
		_ = old.Close()
	}
	p := n.plugin(testhooks.Hooks{})
	rep, err := p.Reconcile(context.Background())
	if err != nil {
		n.t.Fatalf("reconcile: %v", err)
	}
	return p, rep
}

// specs are the UIDs of the claims that have a CDI spec.
func (n *node) specs() []string {
	uids, err := n.writer.List()
	if err != nil {
		n.t.Fatal(err)
	}
	return uids
}

// uidOf derives a stable claim UID from a name.
func uidOf(name string) types.UID {
	return types.UID(uuid.NewSHA1(uuid.NameSpaceOID, []byte(name)).String())
}

// result is an allocation result of the test driver in pool, for request "accel".
func result(pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "accel", Driver: driverName, Pool: pool, Device: device}
}

// allocated is a claim allocated the results.
func allocated(name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uidOf(name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: slices.Clone(results)}}},
	}
}

// cdiID is the CDI device ID a claim's device gets: "<vendor>/<class>=<claimUID>-<device>".
func cdiID(c *resourceapi.ResourceClaim, device string) string {
	return driverName + "/claim=" + string(c.UID) + "-" + device
}
