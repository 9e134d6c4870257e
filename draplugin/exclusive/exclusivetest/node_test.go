package exclusivetest_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/exclusive/exclusivetest"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

const driver = "fpga.example.com"

func newNode(t *testing.T, opts ...exclusivetest.NodeOption) *exclusivetest.Node {
	t.Helper()
	n, err := exclusivetest.NewNode(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

func newPlugin(t *testing.T, n *exclusivetest.Node, hooks testhooks.Hooks) *exclusive.Plugin {
	t.Helper()
	p, err := n.NewPlugin(t.Context(), exclusive.Config{DriverName: driver, Driver: fpgaDriver{}, TestHooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNodeLayout: the node creates the directories kubelet and the runtime would, keeps its
// boot when built again on the same directory (a crash test's child process), and Reboot gives
// a new boot ID and an empty CDI directory while the state directory stays. Close removes the
// node's own directory only.
func TestNodeLayout(t *testing.T) {
	dir := t.TempDir()
	n := newNode(t, exclusivetest.WithDir(dir), exclusivetest.WithNodeName("fpga-node"))
	for _, d := range []string{n.StateDir, n.CDIDir, n.PluginDir, n.RegistrarDir} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() || !strings.HasPrefix(d, dir) {
			t.Errorf("directory %s: %v", d, err)
		}
	}
	boot := readFile(t, n.BootIDPath)
	again := newNode(t, exclusivetest.WithDir(dir))
	if got := readFile(t, again.BootIDPath); got != boot {
		t.Errorf("a node built again on the directory has boot %q, want %q", got, boot)
	}

	p := newPlugin(t, n, testhooks.Hooks{})
	c, err := n.Allocate(t.Context(), p, kubelettest.Claim("c", driver, ""))
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Allocation.Devices.Results[0].Pool != "fpga-node" {
		t.Errorf("allocated %+v, want a device of pool fpga-node", c.Status.Allocation.Devices.Results)
	}
	if _, err := kubelettest.Prepare(t.Context(), p, c); err != nil {
		t.Fatal(err)
	}
	if err := n.Reboot(); err != nil {
		t.Fatal(err)
	}
	specs, err := n.Specs(driver)
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, n.BootIDPath) == boot || len(specs) > 0 {
		t.Errorf("after reboot: boot %q (was %q), specs %v", readFile(t, n.BootIDPath), boot, specs)
	}
	if _, err := os.Stat(filepath.Join(n.StateDir, "checkpoint.json")); err != nil {
		t.Errorf("the state directory lost the checkpoint: %v", err)
	}

	own, err := exclusivetest.NewNode()
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(own.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left %s: %v", own.Dir, err)
	}
}

// TestServe: the plugin registers through the node's registration socket, publishes its
// devices to the fake API server, and prepares through the DRA socket, twice (the claim is
// stored again), and a kubelet expecting another driver refuses it.
func TestServe(t *testing.T) {
	n := newNode(t)
	p := newPlugin(t, n, testhooks.Hooks{})
	srv, err := n.Serve(t.Context(), p, exclusive.StartConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	published, err := srv.ResourceSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range published {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	if diff := cmp.Diff([]string{"fpga-0", "fpga-1"}, slices.Sorted(slices.Values(names))); diff != "" {
		t.Errorf("published devices (-want +got):\n%s", diff)
	}
	c, err := n.Allocate(t.Context(), p, kubelettest.Claim("c", driver, ""))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		resp, err := srv.Prepare(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Claims[string(c.UID)]; r.Error != "" || len(r.Devices) != 1 {
			t.Fatalf("prepare %d: %+v", i, r)
		}
	}
	if _, err := kubelettest.ConnectKubelet(t.Context(), kubelettest.RegistrationSocket(n.RegistrarDir, driver), "other.example.com"); err == nil ||
		!strings.Contains(err.Error(), `want DRA plugin "other.example.com"`) {
		t.Errorf("ConnectKubelet with the wrong driver: %v", err)
	}
}

// TestCrashAndRestart stops a prepare at its second crash point, after the first device was
// prepared, and restarts the plugin on the node: reconciliation rolls the prepare back and the
// retried prepare succeeds.
func TestCrashAndRestart(t *testing.T) {
	n := newNode(t)
	c := kubelettest.Claim("c", driver, "")
	crash := testhooks.CrashAt(c.UID, 2)
	p := newPlugin(t, n, crash.Hooks())
	c, err := n.Allocate(t.Context(), p, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubelettest.Prepare(t.Context(), p, c); !errors.Is(err, testhooks.ErrCrash) {
		t.Fatalf("prepare: %v, want a simulated crash", err)
	}
	if diff := cmp.Diff([]testhooks.CrashPoint{testhooks.CrashAfterPrepareStarted, testhooks.CrashAfterDevicePrepared}, crash.Seen()); diff != "" {
		t.Errorf("crash points seen (-want +got):\n%s", diff)
	}
	_ = p.Close()
	restarted := newPlugin(t, n, testhooks.Hooks{})
	rep, err := restarted.Reconcile(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RolledBack) != 1 {
		t.Errorf("rolled back %v, want the claim", rep.RolledBack)
	}
	if _, err := kubelettest.Prepare(t.Context(), restarted, c); err != nil {
		t.Fatalf("retried prepare: %v", err)
	}
}

// TestDeletedSlicesComeBack: kubelet deletes its node's ResourceSlices when it starts; an
// exclusive plugin publishes them again about a second later, not after the helper's 30-second
// sync delay (the test gives up after 10 s).
func TestDeletedSlicesComeBack(t *testing.T) {
	n := newNode(t)
	srv, err := n.Serve(t.Context(), newPlugin(t, n, testhooks.Hooks{}), exclusive.StartConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	// srv.ResourceSlices waits for slices; the API's own list says when there are none.
	count := func() int {
		list, err := srv.Client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	want := len(mustSlices(t, srv))
	for _, s := range mustSlices(t, srv) {
		if err := srv.Client.ResourceV1().ResourceSlices().Delete(t.Context(), s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d slices left after deleting them all", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for count() != want {
		if time.Now().After(deadline) {
			t.Fatalf("the deleted ResourceSlices did not come back within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustSlices(t *testing.T, srv *exclusivetest.Server) []*resourceapi.ResourceSlice {
	t.Helper()
	published, err := srv.ResourceSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return published
}
