package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// TestSlicesPassAPIValidation runs one node per slice shape and checks that the v1.37.2 API
// server accepted the driver's ResourceSlices (they exist, complete), and that they have the
// shape the flags ask for: static MIG devices as mig-parted's all-balanced layout defines them,
// dynamic MIG devices consuming per-GPU shared counters, full GPUs with consumable memory, and
// a device taint after an XID. Each driver negotiated with the all-on server and kept every
// feature, and created its first slices itself, as the kubelet-plugin helper's ResourceSlice
// controller would, which found nothing to change in them (checkFirstSlicesKept).
func TestSlicesPassAPIValidation(t *testing.T) {
	cases := []struct {
		spec  NodeSpec
		check func(t *testing.T, n *TestNode, pool []resourceapi.ResourceSlice)
	}{
		{NodeSpec{Name: "sl-static-mig", Machine: "dgx-a100-40gb", MIGConfig: "all-balanced", ExtraArgs: controllerLogs}, checkAllBalanced40},
		{NodeSpec{Name: "sl-dynamic-mig", Machine: "dgx-a100-80gb", DynamicMIG: true, ExtraArgs: controllerLogs}, checkDynamicMIG},
		{NodeSpec{Name: "sl-consumable", Machine: "dgx-h100", ConsumableMemory: true, ExtraArgs: controllerLogs}, checkConsumable},
		{NodeSpec{Name: "sl-taints", Machine: "l4x8", ExtraArgs: controllerLogs}, checkTaintAccepted},
	}
	for _, c := range cases {
		t.Run(c.spec.Name, func(t *testing.T) {
			t.Parallel()
			n := suite.StartNode(t, c.spec)
			pool, err := WaitForPool(context.Background(), c.spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range pool {
				if s.Spec.Driver != driverName || ptr.Deref(s.Spec.NodeName, "") != c.spec.Name || s.Spec.Pool.Name != c.spec.Name {
					t.Errorf("slice %s: driver %q node %q pool %q; want %s on its node's pool", s.Name, s.Spec.Driver, ptr.Deref(s.Spec.NodeName, ""), s.Spec.Pool.Name, driverName)
				}
				if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].UID != n.Node.UID {
					t.Errorf("slice %s: owners %v, want the Node %s (so slices go with it)", s.Name, s.OwnerReferences, n.Node.Name)
				}
			}
			checkFirstSlicesKept(t, n, pool)
			c.check(t, n, pool)
			checkEveryFeatureKept(t, n)
		})
	}
}

// controllerLogs makes the driver log what the ResourceSlice controller compares (V(5)).
var controllerLogs = []string{"-v=5"}

// checkFirstSlicesKept: the driver creates its node's first slices itself (draplugin, so that
// they do not wait for the helper's one-second informer poll); the helper's ResourceSlice
// controller must then find them to be the slices it would have created — its first sync of
// the pool reports no new, changed or obsolete slice — and the slices must be the same objects
// afterwards, not rewritten.
func checkFirstSlicesKept(t *testing.T, n *TestNode, pool []resourceapi.ResourceSlice) {
	t.Helper()
	ctx := context.Background()
	var line string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(n.Driver.Proc.LogFile)
		if err != nil {
			return false, err
		}
		for l := range strings.Lines(string(data)) {
			if strings.Contains(l, `"Completed comparison"`) && strings.Contains(l, `poolName="`+n.Spec.Name+`"`) {
				line = l
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the ResourceSlice controller never compared the pool: %v; log %s", err, n.Driver.Proc.LogFile)
	}
	want := fmt.Sprintf("numObsolete=0 numMatchedSlices=%d numChangedMatchedSlices=0 numNewSlices=0", len(pool))
	if !strings.Contains(line, want) {
		t.Errorf("the controller's first sync would change the slices the driver created:\n%s\nwant %s", line, want)
	}
	now, err := suite.Slices(ctx, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	versions := func(ss []resourceapi.ResourceSlice) map[string]string {
		out := map[string]string{}
		for _, s := range ss {
			out[s.Name] = string(s.UID) + "@" + s.ResourceVersion
		}
		return out
	}
	if before, after := versions(pool), versions(now); !maps.Equal(before, after) {
		t.Errorf("slices rewritten after the controller's first sync: %v, then %v", before, after)
	}
}

func countBy(devs map[string]resourceapi.Device, attr resourceapi.QualifiedName) map[string]int {
	out := map[string]int{}
	for _, d := range devs {
		out[ptr.Deref(d.Attributes[attr].StringValue, "")]++
	}
	return out
}

// checkAllBalanced40: mig-parted's all-balanced on an A100-SXM4-40GB is 2x 1g.5gb, 1x 2g.10gb
// and 1x 3g.20gb per GPU; a DGX A100 has 8 GPUs.
func checkAllBalanced40(t *testing.T, _ *TestNode, pool []resourceapi.ResourceSlice) {
	devs := Devices(pool)
	if got := countBy(devs, "type"); fmt.Sprint(got) != fmt.Sprint(map[string]int{"mig": 32}) {
		t.Errorf("device types %v, want 32 MIG devices and no full GPU", got)
	}
	want := map[string]int{"1g.5gb": 16, "2g.10gb": 8, "3g.20gb": 8}
	if got := countBy(devs, "profile"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("profiles %v, want %v", got, want)
	}
}

// checkDynamicMIG: each of the 8 GPUs has a counter set; every device of a GPU consumes
// counters of its own GPU's set only, so the scheduler cannot overcommit a GPU.
func checkDynamicMIG(t *testing.T, _ *TestNode, pool []resourceapi.ResourceSlice) {
	sets := map[string]resourceapi.CounterSet{}
	for _, s := range pool {
		for _, cs := range s.Spec.SharedCounters {
			sets[cs.Name] = cs
		}
	}
	if len(sets) != 8 {
		t.Fatalf("%d counter sets, want one per GPU (8)", len(sets))
	}
	devs := Devices(pool)
	types := countBy(devs, "type")
	if types["gpu"] != 8 || types["mig"] == 0 {
		t.Errorf("device types %v, want 8 full GPUs and their MIG placements", types)
	}
	for name, d := range devs {
		if len(d.ConsumesCounters) != 1 {
			t.Errorf("device %s consumes %d counter sets, want exactly its GPU's", name, len(d.ConsumesCounters))
			continue
		}
		cc := d.ConsumesCounters[0]
		set, ok := sets[cc.CounterSet]
		if !ok {
			t.Errorf("device %s consumes unknown counter set %s", name, cc.CounterSet)
			continue
		}
		for counter, v := range cc.Counters {
			capacity, ok := set.Counters[counter]
			if !ok || v.Value.Cmp(capacity.Value) > 0 {
				t.Errorf("device %s consumes %s=%s of set %s, which has %v", name, counter, v.Value.String(), set.Name, capacity.Value.String())
			}
		}
	}
}

// checkConsumable: 8 full H100s, each shareable by several claims by memory.
func checkConsumable(t *testing.T, _ *TestNode, pool []resourceapi.ResourceSlice) {
	devs := Devices(pool)
	if got := countBy(devs, "type"); got["gpu"] != 8 || len(got) != 1 {
		t.Errorf("device types %v, want 8 full GPUs", got)
	}
	for name, d := range devs {
		if !ptr.Deref(d.AllowMultipleAllocations, false) {
			t.Errorf("device %s does not allow multiple allocations", name)
		}
		if c, ok := d.Capacity["memory"]; !ok || c.RequestPolicy == nil {
			t.Errorf("device %s: memory capacity %+v has no request policy", name, c)
		}
	}
}

// checkTaintAccepted: an XID on GPU 3 republishes the slices with a taint on gpu-3; the API
// server must accept the update.
func checkTaintAccepted(t *testing.T, n *TestNode, _ []resourceapi.ResourceSlice) {
	ctx := context.Background()
	if err := n.InjectXID(ctx, 3, 79); err != nil {
		t.Fatal(err)
	}
	if _, err := waitForTaint(ctx, n.Spec.Name, "gpu-3", true); err != nil {
		t.Fatalf("%v\ndriver log:\n%s", err, n.Driver.Proc.Tail(2000))
	}
}

// waitForTaint waits until device has a health taint (want) or none (!want) in the node's
// pool, and returns the taints.
func waitForTaint(ctx context.Context, node, device string, want bool) ([]resourceapi.DeviceTaint, error) {
	var taints []resourceapi.DeviceTaint
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		slices, err := Slices(ctx, node)
		if err != nil {
			return false, err
		}
		pool, _ := completePool(slices)
		d, ok := Devices(pool)[device]
		if !ok {
			return false, nil
		}
		taints = nil
		for _, tt := range d.Taints {
			if strings.HasPrefix(tt.Key, driverName+"/") {
				taints = append(taints, tt)
			}
		}
		return (len(taints) > 0) == want, nil
	})
	if err != nil {
		return nil, fmt.Errorf("device %s of node %s: health taint present=%v never reached (taints %v): %w", device, node, want, taints, err)
	}
	return taints, nil
}

// TestStoppedWhileStarting: the driver publishes its first slices before the kubelet-plugin
// helper's ResourceSlice controller has synced (about a second after the start), so a node can
// be stopped — SIGTERM, as kubelet stops a pod — while the driver is still starting. It must
// exit cleanly (the test suite fails a driver that does not), and its slices stay published.
func TestStoppedWhileStarting(t *testing.T) {
	ctx := context.Background()
	name := "stopped-starting"
	n := suite.StartNode(t, NodeSpec{Name: name, Machine: "dgx-a100-40gb", NoWaitForSlices: true})
	var pool []resourceapi.ResourceSlice
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := suite.Slices(ctx, name)
		if err != nil {
			return false, nil
		}
		pool, _ = completePool(got)
		return pool != nil, nil
	}); err != nil {
		t.Fatalf("pool never complete: %v", err)
	}
	if err := n.Driver.Proc.Stop(30 * time.Second); err != nil {
		t.Fatalf("driver stopped while starting: %v; log %s", err, n.Driver.Proc.LogFile)
	}
	if log, _ := os.ReadFile(n.Driver.Proc.LogFile); !strings.Contains(string(log), "Shutting down before serving") {
		t.Logf("the stop came after the driver had started (a slow machine); log %s", n.Driver.Proc.LogFile)
	}
	if got, err := suite.Slices(ctx, name); err != nil || len(got) != len(pool) {
		t.Errorf("after the stop: %d slices (%v), want the %d published", len(got), err, len(pool))
	}
}

// TestXIDWhileStarting: the slices are visible about a second before the driver has finished
// starting; an XID in that second must not be missed. The health monitor starts before the
// first slices are published, so the taint follows.
func TestXIDWhileStarting(t *testing.T) {
	ctx := context.Background()
	name := "xid-starting"
	n := suite.StartNode(t, NodeSpec{Name: name, Machine: "l4x8", NoWaitForSlices: true})
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := suite.Slices(ctx, name)
		if err != nil {
			return false, nil
		}
		pool, _ := completePool(got)
		return pool != nil, nil
	}); err != nil {
		t.Fatalf("pool never complete: %v", err)
	}
	if err := n.InjectXID(ctx, 5, 79); err != nil {
		t.Fatal(err)
	}
	if log, _ := os.ReadFile(n.Driver.Proc.LogFile); strings.Contains(string(log), `"Serving"`) {
		t.Logf("the XID came after the driver had started (a slow machine); log %s", n.Driver.Proc.LogFile)
	}
	if _, err := waitForTaint(ctx, name, "gpu-5", true); err != nil {
		t.Fatalf("%v; log %s", err, n.Driver.Proc.LogFile)
	}
}
