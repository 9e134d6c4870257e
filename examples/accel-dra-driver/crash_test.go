package main

import (
	"context"
	"maps"
	"os"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/exclusive/exclusivetest"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// The crash test runs the plugin serve builds in a child process (this test binary,
// re-executed) and kills it with SIGKILL at a crash point of prepare or unprepare. The
// accelerators' reservations live in files, as a kernel driver keeps them when the process
// driving it dies; the parent then starts the plugin again on the same node, as a restarted
// pod does, and checks what reconciliation and kubelet's retry leave.
var crash = exclusivetest.Kill{Plugin: crashPlugin, Claim: crashClaim}

func TestMain(m *testing.M) {
	crash.Child()
	os.Exit(m.Run())
}

// crashClaim is the claim the crash test prepares: two accelerators, so that a crash can fall
// between them.
func crashClaim() *resourceapi.ResourceClaim {
	c := allocated("c", testNode, "accel-0")
	r := c.Status.Allocation.Devices.Results
	c.Status.Allocation.Devices.Results = append(r, r[0])
	c.Status.Allocation.Devices.Results[1].Device = "accel-1"
	return c
}

// crashPlugin is the plugin serve builds on the node in dir, with hooks.
func crashPlugin(ctx context.Context, dir string, hooks testhooks.Hooks) (*exclusive.Plugin, error) {
	node, err := exclusivetest.NewNode(exclusivetest.WithDir(dir), exclusivetest.WithNodeName(testNode))
	if err != nil {
		return nil, err
	}
	cfg, err := onNode(node).pluginConfig()
	if err != nil {
		return nil, err
	}
	cfg.TestHooks = hooks
	if cfg, err = node.Config(cfg); err != nil {
		return nil, err
	}
	return exclusive.New(ctx, cfg)
}

// TestKilledAtEveryCrashPoint kills prepare, then unprepare, at every crash point in turn and
// restarts the plugin on the node. Reconciliation leaves nothing of the claim (no reservation,
// no spec, no checkpoint entry) unless the kill came after the claim was recorded as prepared,
// and then all of it; kubelet's retry of the call that never answered then leaves the node as
// the call would have.
func TestKilledAtEveryCrashPoint(t *testing.T) {
	var o *accelNode // the node of the kill being checked
	crash.EveryCrashPoint(t, func(t *testing.T) string { o = fakeNode(t, 2); return o.node.Dir },
		func(t *testing.T, _, op string, point testhooks.CrashPoint) { checkAfterKill(t, o, op, point) })
}

// checkAfterKill restarts the plugin on a node whose plugin was killed during op at point and
// checks the node after reconciliation and after kubelet's retry.
func checkAfterKill(t *testing.T, o *accelNode, op string, point testhooks.CrashPoint) {
	c := crashClaim()
	p, cfg := o.newPlugin(t, testhooks.Hooks{})
	rep, err := p.Reconcile(t.Context())
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	specs, err := cfg.CDIWriter.List()
	if err != nil {
		t.Fatal(err)
	}
	owners := []types.UID{o.owner(t, 0), o.owner(t, 1)}
	if op == "prepare" && point == testhooks.CrashAfterPrepareCompleted {
		if rep.Prepared != 1 || owners[0] != c.UID || owners[1] != c.UID || len(specs) != 1 {
			t.Fatalf("a completed prepare was not kept whole: report %s, reserved for %q, specs %v", rep, owners, specs)
		}
	} else if rep.Prepared != 0 || owners[0]+owners[1] != "" || len(specs) > 0 {
		t.Fatalf("an interrupted %s left: report %s, reserved for %q, specs %v", op, rep, owners, specs)
	}
	// The entry says what was interrupted: a prepare is rolled back, an unprepare finished
	// (unless the kill came after the entry was removed).
	undone := map[string]int{"prepare": len(rep.RolledBack), "unprepare": len(rep.UnprepareFinished)}
	want := map[string]int{"prepare": 0, "unprepare": 0}
	if point != testhooks.CrashAfterPrepareCompleted && point != testhooks.CrashAfterUnprepareCompleted {
		want[op] = 1
	}
	if !maps.Equal(want, undone) {
		t.Errorf("claims undone by reconciliation %v, want %v: report %s", undone, want, rep)
	}
	if op == "prepare" {
		devices, err := kubelettest.Prepare(t.Context(), p, c)
		if err != nil || len(devices) != 2 || o.owner(t, 0) != c.UID || o.owner(t, 1) != c.UID {
			t.Fatalf("retried prepare: %v, %v; reserved for %q and %q", devices, err, o.owner(t, 0), o.owner(t, 1))
		}
		return
	}
	if err := kubelettest.Unprepare(t.Context(), p, c); err != nil {
		t.Fatalf("retried unprepare: %v", err)
	}
	if specs, _ := cfg.CDIWriter.List(); o.owner(t, 0)+o.owner(t, 1) != "" || len(specs) > 0 {
		t.Fatalf("retried unprepare left: reserved for %q and %q, specs %v", o.owner(t, 0), o.owner(t, 1), specs)
	}
}
