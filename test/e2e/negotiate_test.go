package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// gatesOff turns off, on every component, each DRA feature gate of an optional ResourceSlice
// feature that v1.37.2 lets be turned off, with the gates that depend on them (the components
// refuse a gate on whose dependency is off): DRAPartitionableDevices (beta), DRAConsumableCapacity
// (beta) with DRAFractionalCapacityRange, DRADeviceTaints (GA in 1.37 but not yet locked) with
// DRADeviceTaintRules, and DRADeviceBindingConditions (beta). DRAResourceClaimDeviceStatus, which
// binding conditions also need, is GA and locked on.
const gatesOff = "DRAPartitionableDevices=false,DRAConsumableCapacity=false,DRAFractionalCapacityRange=false," +
	"DRADeviceTaints=false,DRADeviceTaintRules=false,DRADeviceBindingConditions=false"

// negotiationLine is in the one log line serve writes about what the API server keeps.
const negotiationLine = "optional ResourceSlice feature"

// startGatedCluster starts a second control plane (with gates) and installs the chart on it,
// sharing the suite's binaries and driver; it is stopped when t ends.
func startGatedCluster(t *testing.T, gates string) *Suite {
	t.Helper()
	g := &Suite{Dir: filepath.Join(suite.Dir, "g"), Repo: suite.Repo, Bins: suite.Bins, DriverBinary: suite.DriverBinary}
	t.Cleanup(func() {
		g.mu.Lock()
		for _, d := range g.drivers {
			_ = d.Proc.Stop(5 * time.Second)
		}
		g.mu.Unlock()
		if g.CP != nil {
			g.CP.Stop()
		}
		_ = os.RemoveAll(filepath.Join(g.Dir, "cp", "etcd"))
		if t.Failed() {
			t.Logf("gated cluster logs: %s", filepath.Join(g.Dir, "cp", "logs"))
		}
	})
	start := time.Now()
	if err := g.startCluster(context.Background(), filepath.Join(g.Dir, "cp"), framework.WithFeatureGates(gates)); err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane with --feature-gates=%s and chart ready in %s", gates, time.Since(start).Round(100*time.Millisecond))
	return g
}

// TestNegotiationOnAGatedServer runs serve, asked for dynamic MIG and consumable memory, against
// a v1.37.2 control plane whose components run with gatesOff. The driver must publish (no
// publish failure), publish exactly what the server stores (zero dropped fields: the stored
// slices equal those `render` builds for the machine without the two features, and the
// kubelet-plugin helper reports no dropped fields), say so in one log line, keep health out of
// the slices, and a full-GPU claim and a static MIG claim must still be allocated by the real
// scheduler and prepared.
func TestNegotiationOnAGatedServer(t *testing.T) {
	ctx := context.Background()
	g := startGatedCluster(t, gatesOff)
	migConfig := mixedMIGConfig(t) // GPUs 0-1: 7x 1g.10gb each; GPUs 2-7 whole
	spec := NodeSpec{Name: "neg-gated", Machine: "dgx-a100-80gb", MIGConfig: migConfig, DynamicMIG: true, ConsumableMemory: true}
	n := g.StartNode(t, spec)
	pool, err := g.WaitForPool(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := renderedSpecs(t, "--machine", spec.Machine, "--mig-config", migConfig, "--node-name", spec.Name)
	if got := specsOf(t, pool); strings.Join(got, "---\n") != strings.Join(want, "---\n") {
		t.Errorf("stored slices differ from render's without --dynamic-mig and --consumable-memory:\nstored:\n%s\nrendered:\n%s",
			strings.Join(got, "---\n"), strings.Join(want, "---\n"))
	}
	checkNoGatedFields(t, pool)
	if kinds := countBy(Devices(pool), "type"); kinds["gpu"] != 6 || kinds["mig"] != 14 || len(kinds) != 2 {
		t.Errorf("device types %v, want GPUs 2-7 whole (6) and GPUs 0-1 as 7 static 1g.10gb each (14)", kinds)
	}
	checkNegotiationLogged(t, n, "drops optional ResourceSlice features",
		"DRAPartitionableDevices (the API server dropped spec.sharedCounters", "DRAConsumableCapacity (", "DRADeviceTaints (", "DRADeviceBindingConditions (",
		"dynamic MIG: MIG-capable GPUs are published as they are partitioned now", "consumable memory: full GPUs are published for exclusive use",
		"health taints: unhealthy devices are reported only through WatchHealthStatus")

	// Health stays out of the slices: an XID neither taints nor makes a publish lose fields.
	if err := n.InjectXID(ctx, 3, 79); err != nil {
		t.Fatal(err)
	}
	if err := waitLogged(n, `"Device unhealthy"`); err != nil {
		t.Fatal(err)
	}
	scheduleFullGPUAndStaticMIG(t, g, n)
	after, err := g.WaitForPool(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	checkNoGatedFields(t, after)
	if log := driverLog(t, n); strings.Contains(log, "dropped by the apiserver") || strings.Contains(log, "Publishing ResourceSlices failed") {
		t.Errorf("the driver reported dropped fields or a failed publish; log %s", n.Driver.Proc.LogFile)
	}
}

// scheduleFullGPUAndStaticMIG creates a pod with a full-GPU claim and one with a 1g.10gb claim
// on the gated cluster, waits for the real scheduler to allocate and bind them, and prepares
// the claims through the driver's socket.
func scheduleFullGPUAndStaticMIG(t *testing.T, g *Suite, n *TestNode) {
	t.Helper()
	ctx := context.Background()
	const ns = "negotiated"
	if err := framework.CreateNamespace(ctx, g.Client, ns, nil); err != nil {
		t.Fatal(err)
	}
	claims := []*resourceapi.ResourceClaim{
		claimSpec("whole", "gpu.nvidia.com", "", nil),
		claimSpec("slice", "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'", nil),
	}
	for _, c := range claims {
		if _, err := g.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Client.CoreV1().Pods(ns).Create(ctx, podUsing(c.Name, c.Name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var allocated []*resourceapi.ResourceClaim
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		allocated = nil
		for _, c := range claims {
			p, err := g.Client.CoreV1().Pods(ns).Get(ctx, c.Name, metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != n.Spec.Name {
				return false, err
			}
			got, err := g.Client.ResourceV1().ResourceClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
			if err != nil || !reservedFor(got, p) {
				return false, err
			}
			allocated = append(allocated, got)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods with a full-GPU and a static MIG claim not scheduled on %s: %v", n.Spec.Name, err)
	}
	whole, slice := allocated[0].Status.Allocation.Devices.Results[0].Device, allocated[1].Status.Allocation.Devices.Results[0].Device
	if strings.Contains(whole, "-mig-") || !strings.Contains(slice, "-mig-1g10gb-") {
		t.Errorf("allocated %s and %s, want a whole GPU and a static 1g.10gb MIG device", whole, slice)
	}
	if _, err := n.prepare(ctx, allocated...); err != nil {
		t.Errorf("prepare on the gated cluster: %v", err)
	}
}

// checkNoGatedFields fails when a slice uses a field of a feature gatesOff turns off.
func checkNoGatedFields(t *testing.T, pool []resourceapi.ResourceSlice) {
	t.Helper()
	for _, s := range pool {
		if len(s.Spec.SharedCounters) > 0 || s.Spec.PerDeviceNodeSelection != nil {
			t.Errorf("slice %s has shared counters or per-device node selection", s.Name)
		}
		for _, d := range s.Spec.Devices {
			policy := false
			for _, c := range d.Capacity {
				policy = policy || c.RequestPolicy != nil
			}
			if len(d.ConsumesCounters) > 0 || d.AllowMultipleAllocations != nil || policy || len(d.Taints) > 0 ||
				len(d.BindingConditions) > 0 || d.BindsToNode != nil {
				t.Errorf("slice %s device %s uses a field of a disabled feature", s.Name, d.Name)
			}
		}
	}
}

// renderedSpecs runs the driver's render command and returns the specs of its ResourceSlices.
func renderedSpecs(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command(suite.DriverBinary, append([]string{"render"}, args...)...).Output()
	if err != nil {
		t.Fatalf("render %v: %v", args, err)
	}
	var slices []resourceapi.ResourceSlice
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var s resourceapi.ResourceSlice
		if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
			t.Fatal(err)
		}
		if s.Kind == "ResourceSlice" {
			slices = append(slices, s)
		}
	}
	if len(slices) == 0 {
		t.Fatalf("render %v printed no ResourceSlice", args)
	}
	return specsOf(t, slices)
}

// specsOf returns the devices and shared counters of each slice as YAML, sorted: the part of a
// slice a driver decides (names, pool generations and owners are the helper's).
func specsOf(t *testing.T, slices []resourceapi.ResourceSlice) []string {
	t.Helper()
	var out []string
	for _, s := range slices {
		y, err := yaml.Marshal(resourceapi.ResourceSliceSpec{Devices: s.Spec.Devices, SharedCounters: s.Spec.SharedCounters})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(y))
	}
	sort.Strings(out)
	return out
}

// driverLog is everything the node's driver processes logged.
func driverLog(t *testing.T, n *TestNode) string {
	t.Helper()
	data, err := os.ReadFile(n.Driver.Proc.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// waitLogged waits until the node's driver log contains s.
func waitLogged(n *TestNode, s string) error {
	return wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(n.Driver.Proc.LogFile)
		return err == nil && strings.Contains(string(data), s), nil
	})
}

// checkNegotiationLogged checks that the driver logged exactly one line about the features the
// API server keeps, containing every want.
func checkNegotiationLogged(t *testing.T, n *TestNode, want ...string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(driverLog(t, n), "\n") {
		if strings.Contains(l, negotiationLine) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d log lines about the negotiation (want 1): %q; log %s", len(lines), lines, n.Driver.Proc.LogFile)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("the negotiation log line does not say %q:\n%s", w, lines[0])
		}
	}
}

// checkEveryFeatureKept: on the shared, all-on cluster the driver kept every feature.
func checkEveryFeatureKept(t *testing.T, n *TestNode) {
	t.Helper()
	checkNegotiationLogged(t, n, "keeps every optional ResourceSlice feature",
		`features=["DRAPartitionableDevices","DRAConsumableCapacity","DRADeviceTaints","DRADeviceBindingConditions"]`)
}
