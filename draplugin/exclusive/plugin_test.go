package exclusive_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/locks"
)

// TestPrepareUnprepare: a prepared claim gets a CDI spec whose device is the driver's edits
// under "<kind>=<claimUID>-<device>"; preparing it again is answered from the checkpoint (the
// driver is not called); a claim allocated other devices since fails and changes nothing;
// unprepare removes the spec and releases the device; unpreparing again succeeds.
func TestPrepareUnprepare(t *testing.T) {
	n := newNode(t, 4)
	p := n.plugin(testhooks.Hooks{})
	c := allocated("train", result(nodeName, "accel-2"))
	want := []kubeletplugin.Device{{Requests: []string{"accel"}, PoolName: nodeName, DeviceName: "accel-2", CDIDeviceIDs: []string{cdiID(c, "accel-2")}}}
	for i := range 2 {
		got, err := kubelettest.Prepare(t.Context(), p, c)
		if err != nil {
			t.Fatalf("prepare %d: %v", i, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("prepare %d: result (-want +got):\n%s", i, diff)
		}
	}
	held, calls := n.driver.state()
	if diff := cmp.Diff(map[string]types.UID{"accel-2": c.UID}, held); diff != "" {
		t.Errorf("held devices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"prepare accel-2"}, calls); diff != "" {
		t.Errorf("driver calls of two prepares (-want +got):\n%s", diff)
	}
	spec, err := n.writer.Read(string(c.UID))
	if err != nil {
		t.Fatal(err)
	}
	wantDevices := []specs.Device{{Name: string(c.UID) + "-accel-2", ContainerEdits: specs.ContainerEdits{
		DeviceNodes: []*specs.DeviceNode{{Path: "/dev/accel-2", Type: "c", Major: 240, Minor: 7}}}}}
	if diff := cmp.Diff(wantDevices, spec.Devices); diff != "" {
		t.Errorf("CDI spec devices (-want +got):\n%s", diff)
	}

	moved := allocated("train", result(nodeName, "accel-3"))
	if _, err := kubelettest.Prepare(t.Context(), p, moved); err == nil || !strings.Contains(err.Error(), "is now allocated") {
		t.Fatalf("prepare of a claim allocated another device: error %v", err)
	}
	if held, calls := n.driver.state(); len(calls) > 0 || held["accel-3"] != "" {
		t.Errorf("a refused re-prepare called the driver: %v (held %v)", calls, held)
	}

	if err := kubelettest.Unprepare(t.Context(), p, c); err != nil {
		t.Fatalf("unprepare: %v", err)
	}
	held, calls = n.driver.state()
	if len(held) > 0 || !cmp.Equal(calls, []string{"unprepare accel-2"}) {
		t.Errorf("after unprepare: held %v, calls %v; want none held, one unprepare", held, calls)
	}
	if got := n.specs(); len(got) > 0 {
		t.Errorf("specs left after unprepare: %v", got)
	}
	if err := kubelettest.Unprepare(t.Context(), p, c); err != nil {
		t.Fatalf("second unprepare: %v", err)
	}
	if _, calls := n.driver.state(); len(calls) > 0 {
		t.Errorf("a second unprepare called the driver: %v", calls)
	}
}

// TestClaimsThatCannotBePreparedHereLeaveNothing: results of other drivers are ignored; a
// device of this driver in another pool, one the driver does not list, one allocated twice, an
// unallocated claim and an invalid UID are errors that say so, before anything is done.
func TestClaimsThatCannotBePreparedHereLeaveNothing(t *testing.T) {
	other := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.nvidia.com", Pool: nodeName, Device: "gpu-0"}
	twice := result(nodeName, "accel-0")
	twice.Request = "second"
	cases := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string // substring of the error; "" for success with no devices
	}{
		{"other driver only", allocated("c", other), ""},
		{"other pool", allocated("c", result("node-2", "accel-0")), `device accel-0: it is in pool "node-2", but this plugin serves pool "node-1"`},
		{"other pool after a good one", allocated("c", result(nodeName, "accel-1"), result("node-2", "accel-0")), `in pool "node-2"`},
		{"unknown device", allocated("c", other, result(nodeName, "accel-9")), "device accel-9: the driver does not list it on node node-1"},
		{"device twice", allocated("c", result(nodeName, "accel-0"), twice), `device accel-0: allocated for requests "accel" and "second"`},
		{"not allocated", func() *resourceapi.ResourceClaim {
			c := allocated("c")
			c.Status.Allocation = nil
			return c
		}(), "the claim is not allocated"},
		{"invalid UID", func() *resourceapi.ResourceClaim {
			c := allocated("c", result(nodeName, "accel-0"))
			c.UID = "../../etc"
			return c
		}(), `claim UID "../../etc"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, 4)
			p := n.plugin(testhooks.Hooks{})
			devices, err := kubelettest.Prepare(t.Context(), p, tc.claim)
			switch {
			case tc.want == "" && (err != nil || len(devices) > 0):
				t.Fatalf("prepare: %v, %v; want success with no devices", devices, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("prepare: error %v, want one containing %q", err, tc.want)
			}
			held, calls := n.driver.state()
			if len(held)+len(calls) > 0 || len(n.specs()) > 0 {
				t.Errorf("left behind: held %v, driver calls %v, specs %v", held, calls, n.specs())
			}
			if _, rep := n.restart(p); rep.Prepared+len(rep.RolledBack) > 0 {
				t.Errorf("left a checkpoint entry: %s", rep)
			}
		})
	}
}

// TestFailedPrepareIsUndone: when the driver fails a device, the devices prepared before are
// unprepared, no spec and no entry are left, and the error names the device. When undoing fails
// too, the claim stays recorded and the next start undoes it.
func TestFailedPrepareIsUndone(t *testing.T) {
	n := newNode(t, 4)
	p := n.plugin(testhooks.Hooks{})
	c := allocated("c", result(nodeName, "accel-0"), result(nodeName, "accel-1"))
	n.driver.setFail("prepare accel-1", errors.New("firmware did not answer"))
	if _, err := kubelettest.Prepare(t.Context(), p, c); err == nil || !strings.Contains(err.Error(), "device accel-1: prepare: firmware did not answer") {
		t.Fatalf("prepare: error %v", err)
	}
	held, calls := n.driver.state()
	wantCalls := []string{"prepare accel-0", "prepare accel-1", "unprepare accel-1", "unprepare accel-0"}
	if len(held) > 0 || !cmp.Equal(wantCalls, calls) || len(n.specs()) > 0 {
		t.Fatalf("after a failed prepare: held %v, calls %v (want %v), specs %v", held, calls, wantCalls, n.specs())
	}

	n.driver.setFail("unprepare accel-0", errors.New("device busy"))
	_, err := kubelettest.Prepare(t.Context(), p, c)
	if err == nil || !strings.Contains(err.Error(), "undoing the attempt failed too") || !strings.Contains(err.Error(), "device accel-0: unprepare: device busy") {
		t.Fatalf("prepare with a failing undo: error %v", err)
	}
	n.driver.setFail("prepare accel-1", nil)
	n.driver.setFail("unprepare accel-0", nil)
	p2, rep := n.restart(p)
	if diff := cmp.Diff([]string{"default/c (" + string(c.UID) + ")"}, rep.RolledBack); diff != "" {
		t.Errorf("rolled back at restart (-want +got):\n%s", diff)
	}
	if held, _ := n.driver.state(); len(held) > 0 {
		t.Errorf("held after the restart: %v", held)
	}
	if _, err := kubelettest.Prepare(t.Context(), p2, c); err != nil {
		t.Fatalf("prepare after the restart: %v", err)
	}
}

// TestFailedCheckpointWriteIsUndone: a checkpoint write that fails (testhooks.Hooks.CheckpointWrite,
// as a full disk) fails the prepare, which is undone, and the next prepare succeeds.
func TestFailedCheckpointWriteIsUndone(t *testing.T) {
	n := newNode(t, 2)
	var full atomic.Bool
	p := n.plugin(testhooks.Hooks{CheckpointWrite: func(string) error {
		if full.Load() {
			return errors.New("no space left on device")
		}
		return nil
	}})
	c := allocated("c", result(nodeName, "accel-0"))
	full.Store(true)
	if _, err := kubelettest.Prepare(t.Context(), p, c); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("prepare on a full disk: error %v", err)
	}
	if held, _ := n.driver.state(); len(held) > 0 || len(n.specs()) > 0 {
		t.Fatalf("a failed prepare left: held %v, specs %v", held, n.specs())
	}
	full.Store(false)
	if _, err := kubelettest.Prepare(t.Context(), p, c); err != nil {
		t.Fatalf("prepare after the disk was freed: %v", err)
	}
}

// TestRebootReleasesClaims: a claim prepared in an earlier boot is unprepared by
// reconciliation (kubelet prepares it again after a reboot), and preparing it again works.
func TestRebootReleasesClaims(t *testing.T) {
	n := newNode(t, 2)
	p := n.plugin(testhooks.Hooks{})
	c := allocated("c", result(nodeName, "accel-1"))
	if _, err := kubelettest.Prepare(t.Context(), p, c); err != nil {
		t.Fatal(err)
	}
	n.reboot("boot-2")
	p2, rep := n.restart(p)
	if diff := cmp.Diff([]string{"default/c (" + string(c.UID) + ")"}, rep.Released); diff != "" || !rep.Checkpoint.Rebooted {
		t.Errorf("released at restart (-want +got):\n%s\nreport: %s", diff, rep)
	}
	if held, _ := n.driver.state(); len(held) > 0 || len(n.specs()) > 0 {
		t.Errorf("after the reboot: held %v, specs %v", held, n.specs())
	}
	if _, err := kubelettest.Prepare(t.Context(), p2, c); err != nil {
		t.Fatalf("prepare after the reboot: %v", err)
	}
}

// TestLostCheckpoint: with the checkpoint gone, claims whose spec exists are adopted, never
// removed, and kubelet's unprepare releases them; a spec naming a device the driver no longer
// lists is kept and reported.
func TestLostCheckpoint(t *testing.T) {
	n := newNode(t, 3)
	p := n.plugin(testhooks.Hooks{})
	kept := allocated("kept", result(nodeName, "accel-0"))
	gone := allocated("gone", result(nodeName, "accel-2"))
	for _, c := range []*resourceapi.ResourceClaim{kept, gone} {
		if _, err := kubelettest.Prepare(t.Context(), p, c); err != nil {
			t.Fatal(err)
		}
	}
	before, err := n.writer.Read(string(kept.UID))
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	if err := os.RemoveAll(n.stateDir); err != nil {
		t.Fatal(err)
	}
	n.driver.setDevices(2) // accel-2 is gone
	p2 := n.plugin(testhooks.Hooks{})
	rep, err := p2.Reconcile(t.Context())
	if err == nil || !strings.Contains(err.Error(), "accel-2") {
		t.Errorf("reconcile: error %v, want one naming accel-2", err)
	}
	if diff := cmp.Diff([]string{string(kept.UID)}, rep.Adopted); diff != "" || !rep.Checkpoint.Fresh {
		t.Errorf("adopted (-want +got):\n%s\nreport: %s", diff, rep)
	}
	if diff := cmp.Diff([]string{string(gone.UID)}, rep.NotAdopted); diff != "" {
		t.Errorf("not adopted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values([]string{string(gone.UID), string(kept.UID)})), n.specs()); diff != "" {
		t.Errorf("specs after adoption (-want +got):\n%s", diff)
	}
	got, err := kubelettest.Prepare(t.Context(), p2, kept)
	if err != nil || len(got) != 1 || got[0].CDIDeviceIDs[0] != cdiID(kept, "accel-0") || got[0].Requests[0] != "accel" {
		t.Fatalf("prepare of the adopted claim: %v, %v", got, err)
	}
	if after, _ := n.writer.Read(string(kept.UID)); !cmp.Equal(before, after) {
		t.Errorf("the adopted claim's spec changed: %s", cmp.Diff(before, after))
	}
	if err := kubelettest.Unprepare(t.Context(), p2, kept); err != nil {
		t.Fatal(err)
	}
	if held, _ := n.driver.state(); held["accel-0"] != "" {
		t.Errorf("unprepare of the adopted claim did not release accel-0: %v", held)
	}
}

// TestSpecsReconciled: the missing spec of a prepared claim is written again with the same
// content; a spec of a claim a trusted checkpoint does not hold is removed.
func TestSpecsReconciled(t *testing.T) {
	n := newNode(t, 2)
	p := n.plugin(testhooks.Hooks{})
	c := allocated("c", result(nodeName, "accel-1"))
	if _, err := kubelettest.Prepare(t.Context(), p, c); err != nil {
		t.Fatal(err)
	}
	before, err := n.writer.Read(string(c.UID))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.writer.Remove(string(c.UID)); err != nil {
		t.Fatal(err)
	}
	orphan := uidOf("orphan")
	cs, err := cdi.NewClaimSpec(n.writer.Kind(), string(orphan), specs.ContainerEdits{}, []cdi.DeviceEdits{{Name: "accel-0",
		Edits: specs.ContainerEdits{Env: []string{"ACCEL=0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.writer.Write(cs); err != nil {
		t.Fatal(err)
	}
	_, rep := n.restart(p)
	ref := "default/c (" + string(c.UID) + ")"
	if !cmp.Equal([]string{ref}, rep.SpecsRewritten) || !cmp.Equal([]string{string(orphan)}, rep.SpecsPruned) || rep.Prepared != 1 {
		t.Errorf("report: %s (rewritten %v, pruned %v)", rep, rep.SpecsRewritten, rep.SpecsPruned)
	}
	after, err := n.writer.Read(string(c.UID))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("rewritten spec (-before +after):\n%s", diff)
	}
}

// TestPrepareGivenUpWhileWaitingForLocks: kubelet's prepare call ends while the plugin waits for
// a device lock that another plugin process holds (a rolling update), and kubelet, the pod
// gone, unprepares the claim, which the checkpoint does not hold yet. Once the lock is free,
// the prepare must not go on: kubelet has forgotten the claim and would never unprepare it.
func TestPrepareGivenUpWhileWaitingForLocks(t *testing.T) {
	n := newNode(t, 2)
	p := n.plugin(testhooks.Hooks{})
	c := allocated("late", result(nodeName, "accel-1"))
	other, err := locks.NewLocks(n.stateDir) // the other plugin process
	if err != nil {
		t.Fatal(err)
	}
	release, err := other.Lock([]string{"accel-0", "accel-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	prepared := make(chan error, 1)
	go func() {
		_, err := kubelettest.Prepare(ctx, p, c)
		prepared <- err
	}()
	time.Sleep(100 * time.Millisecond) // the prepare waits for the lock
	cancel()
	unprepared := make(chan error, 1)
	go func() { unprepared <- kubelettest.Unprepare(t.Context(), p, c) }()
	time.Sleep(100 * time.Millisecond)
	release()
	if err := <-unprepared; err != nil {
		t.Fatalf("kubelet's unprepare: %v", err)
	}
	if err := <-prepared; !errors.Is(err, context.Canceled) {
		t.Errorf("prepare given up by kubelet returned %v, want an error wrapping context.Canceled", err)
	}
	if held, calls := n.driver.state(); len(held) > 0 || len(calls) > 0 {
		t.Errorf("the driver was called for a claim kubelet unprepared: held %v, calls %v", held, calls)
	}
	if got := n.specs(); len(got) > 0 {
		t.Errorf("specs left: %v", got)
	}
}

// TestStopWaitsForOperationsUnderWay: Stop must not return while a prepare is under way (here
// between its driver's Prepare of one device and the next step): a driver releases its
// devices' resources after Stop, which would cut the prepare, or its rollback, short.
func TestStopWaitsForOperationsUnderWay(t *testing.T) {
	n := newNode(t, 2)
	inStep, goOn := make(chan struct{}), make(chan struct{})
	p := n.plugin(testhooks.Hooks{AfterStep: func(point testhooks.CrashPoint, _ types.UID) error {
		if point == testhooks.CrashAfterDevicePrepared {
			close(inStep)
			<-goOn
		}
		return nil
	}})
	c := allocated("busy", result(nodeName, "accel-1"))
	prepared := make(chan error, 1)
	go func() {
		_, err := kubelettest.Prepare(t.Context(), p, c)
		prepared <- err
	}()
	<-inStep
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a prepare was under way")
	case <-time.After(200 * time.Millisecond):
	}
	close(goOn)
	<-stopped
	if err := <-prepared; err != nil {
		t.Fatalf("the prepare under way when Stop was called: %v", err)
	}
	if got := n.specs(); len(got) != 1 {
		t.Errorf("after Stop: specs %v, want the prepare finished", got)
	}
}
