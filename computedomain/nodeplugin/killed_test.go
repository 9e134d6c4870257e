package nodeplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/exclusive/exclusivetest"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu/gputest"
)

// The kill test runs the plugin in a child process (this test binary, re-executed) and kills it
// with SIGKILL at a crash point of a daemon claim's prepare or unprepare: the one device whose
// prepare changes the node (the daemon's directory and the plugin's record). The parent then
// starts the plugin again on the same node directories, as a restarted pod does, and checks what
// reconciliation and kubelet's retry leave.
var kill = exclusivetest.Kill{
	Plugin: func(ctx context.Context, dir string, hooks testhooks.Hooks) (*exclusive.Plugin, error) {
		p, _, err := killPlugin(ctx, dir, hooks)
		return p, err
	},
	Claim: killClaim,
}

func TestMain(m *testing.M) {
	kill.Child()
	os.Exit(m.Run())
}

// killNodeName is the node of the kill test, a tray of a fake rack.
const killNodeName = "rack-00"

// killClaim is the daemon claim the kill test prepares, allocated on killNodeName.
func killClaim() *resourceapi.ResourceClaim {
	c := claim("imex", daemonSel, daemonParams(domainUID))
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "device", Driver: computedomain.DriverName, Pool: killNodeName, Device: nodeplugin.DaemonDevice}},
		Config:  []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: c.Spec.Devices.Config[0].DeviceConfiguration}},
	}}
	return c
}

// killPlugin is the plugin of the node in dir with hooks.
func killPlugin(ctx context.Context, dir string, hooks testhooks.Hooks) (*exclusive.Plugin, *exclusivetest.Node, error) {
	node, err := exclusivetest.NewNode(exclusivetest.WithDir(dir), exclusivetest.WithNodeName(killNodeName))
	if err != nil {
		return nil, nil, err
	}
	rack, err := gputest.NVLDomain("rack", 0, 0)
	if err != nil {
		return nil, nil, err
	}
	machine, err := gputest.New("gb200-nvl4", rack[0].Options()...)
	if err != nil {
		return nil, nil, err
	}
	driver, err := nodeplugin.New(nodeplugin.Config{NodeName: killNodeName, StateDir: node.StateDir, Fabric: fabricOf(machine),
		Domains: nodeplugin.NewClientDomains(nil), Channels: &fakeChannels{}})
	if err != nil {
		return nil, nil, err
	}
	cfg, err := node.Config(exclusive.Config{DriverName: computedomain.DriverName, Driver: driver, TestHooks: hooks})
	if err != nil {
		return nil, nil, err
	}
	p, err := exclusive.New(ctx, cfg)
	return p, node, err
}

// TestKilledAtEveryCrashPoint kills a daemon claim's prepare, then its unprepare, at every
// crash point in turn (a real SIGKILL of the plugin process) and restarts the plugin on the
// node: reconciliation leaves nothing of the claim (no spec, no record, no daemon directory,
// no checkpoint entry) unless the kill came after the claim was recorded as prepared, and then
// all of it; kubelet's retry of the call that never answered leaves the node as the call would
// have.
func TestKilledAtEveryCrashPoint(t *testing.T) {
	kill.EveryCrashPoint(t, func(t *testing.T) string { return t.TempDir() }, checkAfterKill)
}

// checkAfterKill restarts the plugin on the node in dir, whose plugin was killed during op at
// point, and checks the node after reconciliation and after kubelet's retry.
func checkAfterKill(t *testing.T, dir, op string, point testhooks.CrashPoint) {
	p, node, err := killPlugin(t.Context(), dir, testhooks.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rep, err := p.Reconcile(t.Context())
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	traces := func() (specs, dirs, records []string) {
		specs, err := node.Specs(computedomain.DriverName)
		if err != nil {
			t.Fatal(err)
		}
		return specs, listDir(t, filepath.Join(node.StateDir, "domains")), listDir(t, filepath.Join(node.StateDir, "computedomain-claims"))
	}
	specs, dirs, records := traces()
	if op == "prepare" && point == testhooks.CrashAfterPrepareCompleted {
		if rep.Prepared != 1 || len(specs) != 1 || len(dirs) != 1 || len(records) != 1 {
			t.Fatalf("a completed prepare was not kept whole: report %s, specs %v, daemon directories %v, records %v", rep, specs, dirs, records)
		}
	} else if rep.Prepared != 0 || len(specs)+len(dirs)+len(records) > 0 {
		t.Fatalf("an interrupted %s left: report %s, specs %v, daemon directories %v, records %v", op, rep, specs, dirs, records)
	}
	c := killClaim()
	if op == "prepare" {
		if _, err := kubelettest.Prepare(t.Context(), p, c); err != nil {
			t.Fatalf("retried prepare: %v", err)
		}
		if specs, dirs, records := traces(); len(specs) != 1 || len(dirs) != 1 || len(records) != 1 {
			t.Fatalf("retried prepare: specs %v, daemon directories %v, records %v", specs, dirs, records)
		}
		return
	}
	if err := kubelettest.Unprepare(t.Context(), p, c); err != nil {
		t.Fatalf("retried unprepare: %v", err)
	}
	if specs, dirs, records := traces(); len(specs)+len(dirs)+len(records) > 0 {
		t.Fatalf("retried unprepare left: specs %v, daemon directories %v, records %v", specs, dirs, records)
	}
}
