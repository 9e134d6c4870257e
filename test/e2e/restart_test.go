package e2e

import (
	"context"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

var (
	timeSlicingLong = map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
		"sharing": map[string]any{"strategy": "TimeSlicing", "timeSlicingConfig": map[string]any{"interval": "Long"}}}
	mpsConfig = map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
		"sharing": map[string]any{"strategy": "MPS", "mpsConfig": map[string]any{"defaultActiveThreadPercentage": 50}}}
)

// mixedClaims are an exclusive claim, a time-slicing claim shared by two pods and an MPS
// claim, with their pods.
func mixedClaims() ([]*resourceapi.ResourceClaim, []*corev1.Pod) {
	return []*resourceapi.ResourceClaim{
			claimSpec("excl", "gpu.nvidia.com", "", nil),
			claimSpec("ts", "gpu.nvidia.com", "", timeSlicingLong),
			claimSpec("mps", "gpu.nvidia.com", "", mpsConfig),
		}, []*corev1.Pod{
			podUsing("p-excl", "excl"), podUsing("p-ts-1", "ts"), podUsing("p-ts-2", "ts"), podUsing("p-mps", "mps"),
		}
}

// specFiles maps the claim UIDs with a CDI spec on the node to their file names.
func (n *TestNode) specClaims(t *testing.T) []string {
	t.Helper()
	files, err := n.CDISpecs()
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, f := range files {
		if i := strings.LastIndex(f, "_"); i >= 0 && strings.HasSuffix(f, ".json") {
			uids = append(uids, strings.TrimSuffix(f[i+1:], ".json"))
		} else {
			uids = append(uids, "unexpected file "+f)
		}
	}
	sort.Strings(uids)
	return uids
}

func claimUIDs(pods []ScheduledPod) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range pods {
		for _, c := range p.Claims {
			if !seen[string(c.UID)] {
				seen[string(c.UID)] = true
				out = append(out, string(c.UID))
			}
		}
	}
	sort.Strings(out)
	return out
}

// staticMIGClaims are exclusive claims on three MIG profiles of an all-balanced A100-40GB.
func staticMIGClaims() ([]*resourceapi.ResourceClaim, []*corev1.Pod) {
	profile := func(p string) string { return "device.attributes['gpu.nvidia.com'].profile == '" + p + "'" }
	return []*resourceapi.ResourceClaim{
			claimSpec("mig-1g", "mig.nvidia.com", profile("1g.5gb"), nil),
			claimSpec("mig-2g", "mig.nvidia.com", profile("2g.10gb"), nil),
			claimSpec("mig-3g", "mig.nvidia.com", profile("3g.20gb"), nil),
		}, []*corev1.Pod{
			podUsing("p-1g", "mig-1g"), podUsing("p-2g", "mig-2g"), podUsing("p-3g", "mig-3g"),
		}
}

// TestDriverKilledAndRestarted kills the driver with SIGKILL between calls and in the middle
// of NodePrepareResources calls, restarts it (same pod, same directories, as kubelet restarts
// a crashed container), and checks that prepares stay idempotent (the same devices and CDI IDs
// as before the kill), every prepared claim has exactly its spec, and after the pods are gone
// and their claims unprepared nothing is left. Full GPUs (exclusive, time-slicing, MPS) and
// static MIG devices; dynamic MIG is left out because the fake machine's MIG instances live in
// the serve process, so a kill is a reboot for them (issue 11 asks for a persisted fake
// machine).
func TestDriverKilledAndRestarted(t *testing.T) {
	cases := []struct {
		spec   NodeSpec
		claims func() ([]*resourceapi.ResourceClaim, []*corev1.Pod)
	}{
		{NodeSpec{Name: "kill-gpu", Machine: "l4x8"}, mixedClaims},
		{NodeSpec{Name: "kill-mig", Machine: "dgx-a100-40gb", MIGConfig: "all-balanced"}, staticMIGClaims},
	}
	for _, c := range cases {
		t.Run(c.spec.Name, func(t *testing.T) {
			t.Parallel()
			claims, pods := c.claims()
			killAndRestart(t, suite.StartNode(t, c.spec), claims, pods)
		})
	}
}

func killAndRestart(t *testing.T, n *TestNode, claims []*resourceapi.ResourceClaim, pods []*corev1.Pod) {
	ctx := context.Background()
	ns := n.Spec.Name
	createPodsWithClaims(t, n, ns, claims, pods...)
	scheduled, err := waitScheduled(ctx, ns, len(pods), n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]*drapbv1.NodePrepareResourcesResponse{}
	for _, p := range scheduled[:1] {
		if first[p.Pod.Name], err = n.prepare(ctx, p.Claims...); err != nil {
			t.Fatal(err)
		}
	}
	// Kill in the middle of prepare calls for the other pods, at varying points.
	for i, p := range scheduled[1:] {
		done := make(chan error, 1)
		go func() {
			kc := kubeletClaims(p.Claims...)
			resp, err := n.Kubelet.Prepare(ctx, kc...)
			done <- fakekubelet.PrepareErrors(resp, err, kc...)
		}()
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond * time.Duration(i+1))
		n.crash(t)
		t.Logf("pod %s: the prepare in flight during SIGKILL ended with: %v", p.Pod.Name, <-done)
	}
	for _, p := range scheduled {
		resp, err := n.prepare(ctx, p.Claims...)
		if err != nil {
			t.Fatalf("prepare %s after the kills: %v", p.Pod.Name, err)
		}
		if want, ok := first[p.Pod.Name]; ok {
			if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
				t.Errorf("pod %s: prepare after restarts differs from before (-before +after):\n%s", p.Pod.Name, diff)
			}
		}
		n.checkPreparedNow(t, resp, p)
	}
	if diff := cmp.Diff(claimUIDs(scheduled), n.specClaims(t)); diff != "" {
		t.Errorf("CDI specs on the node (-prepared claims +spec files):\n%s", diff)
	}
	// A status.devices write lost with the process (here: removed behind the driver's back)
	// is written again by the next process, which re-queues every prepared claim's status.
	lost := scheduled[0].Claims[0]
	dropDeviceStatus(t, lost)
	// One more crash between calls, then the pods go away.
	n.crash(t)
	if _, err := deviceStatusOf(ctx, lost, "status.devices written again after a restart", func(d []resourceapi.AllocatedDeviceStatus) bool { return len(d) > 0 }); err != nil {
		t.Error(err)
	}
	unprepareAll(t, n, ns, scheduled)
}

// dropDeviceStatus waits until the driver has described the claim's devices in its status,
// then removes those entries, as if the write had been lost with a killed driver process.
func dropDeviceStatus(t *testing.T, claim *resourceapi.ResourceClaim) {
	t.Helper()
	ctx := context.Background()
	if _, err := deviceStatusOf(ctx, claim, "status.devices after prepare", func(d []resourceapi.AllocatedDeviceStatus) bool { return len(d) > 0 }); err != nil {
		t.Fatal(err)
	}
	claims := suite.Client.ResourceV1().ResourceClaims(claim.Namespace)
	c, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Devices = slices.DeleteFunc(c.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool { return d.Driver == driverName })
	if _, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("remove status.devices of claim %s/%s: %v", claim.Namespace, claim.Name, err)
	}
}

// crash kills the driver with SIGKILL, restarts it as kubelet restarts a crashed container,
// and registers it again.
func (n *TestNode) crash(t *testing.T) {
	t.Helper()
	n.Driver.Proc.Kill()
	if err := n.Driver.Restart(context.Background()); err != nil {
		t.Fatalf("restart after SIGKILL: %v", err)
	}
	if err := n.register(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// checkPreparedNow checks a prepare response against the node's current pool.
func (n *TestNode) checkPreparedNow(t *testing.T, resp *drapbv1.NodePrepareResourcesResponse, p ScheduledPod) {
	t.Helper()
	pool, err := WaitForPool(context.Background(), n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.checkPrepared(resp, p.Claims, Devices(pool)); err != nil {
		t.Errorf("pod %s: %v", p.Pod.Name, err)
	}
}

// scheduleByPod creates the claims and pods in a namespace pinned to n and returns the
// scheduled pods by name.
func scheduleByPod(t *testing.T, n *TestNode, ns string, claims []*resourceapi.ResourceClaim, pods []*corev1.Pod) map[string]ScheduledPod {
	t.Helper()
	createPodsWithClaims(t, n, ns, claims, pods...)
	scheduled, err := waitScheduled(context.Background(), ns, len(pods), n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	byPod := map[string]ScheduledPod{}
	for _, p := range scheduled {
		byPod[p.Pod.Name] = p
	}
	return byPod
}

// unprepareAll deletes the pods and unprepares each claim once, then checks the node is clean.
func unprepareAll(t *testing.T, n *TestNode, ns string, pods []ScheduledPod) {
	t.Helper()
	ctx := context.Background()
	seen := map[string]bool{}
	for _, p := range pods {
		if err := deletePods(ctx, ns, p.Pod.Name); err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Claims {
			if !seen[string(c.UID)] {
				seen[string(c.UID)] = true
				if err := n.unprepare(ctx, c); err != nil {
					t.Errorf("unprepare %s: %v", c.Name, err)
				}
			}
		}
	}
	n.checkClean(t)
}

// TestRollingUpdateLosesNothing runs two driver processes for one node as a DaemonSet rolling
// update with maxSurge does (different pod UIDs, same host directories). The new pod starts
// while the old one still serves: kubelet sends a prepare to the old plugin before it has
// registered the new one, then registers the new plugin and sends it the next prepare and the
// unprepares of the claims the old one prepared; then the old pod stops. Every claim kubelet
// considers prepared must keep its spec, the unprepared ones must lose theirs, the slices stay
// published, and at the end nothing is left.
func TestRollingUpdateLosesNothing(t *testing.T) {
	ctx := context.Background()
	spec := NodeSpec{Name: "roll", Machine: "l4x8"}
	n := suite.StartNode(t, spec)
	claims, pods := mixedClaims()
	const ns = "roll"
	byPod := scheduleByPod(t, n, ns, claims, pods)
	old := n.Driver
	if _, err := n.prepare(ctx, byPod["p-excl"].Claims...); err != nil {
		t.Fatal(err)
	}
	// The surge pod starts; until kubelet registers it, calls still go to the old plugin.
	newer, err := suite.startDriver(ctx, spec, uuid.NewString())
	if err != nil {
		t.Fatal(err)
	}
	if newer.RegistrationSocket == old.RegistrationSocket {
		t.Fatalf("both plugin pods registered on %s; a rolling update needs one socket per pod", old.RegistrationSocket)
	}
	if _, err := n.prepare(ctx, byPod["p-ts-1"].Claims...); err != nil {
		t.Fatalf("prepare through the old plugin while the new one starts: %v", err)
	}
	n.Driver = newer
	if err := n.register(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.prepare(ctx, byPod["p-mps"].Claims...); err != nil {
		t.Fatalf("prepare p-mps through the new plugin: %v", err)
	}
	// The exclusive and the time-slicing pods go away (p-ts-2 never started); kubelet sends
	// the unprepares to the plugin it uses now.
	if err := deletePods(ctx, ns, "p-excl", "p-ts-1", "p-ts-2"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"p-excl", "p-ts-1"} {
		if err := n.unprepare(ctx, byPod[name].Claims...); err != nil {
			t.Fatalf("unprepare through the new plugin of %s's claim, prepared by the old one: %v", name, err)
		}
	}
	if err := old.Proc.Stop(10 * time.Second); err != nil {
		t.Errorf("old plugin: %v", err)
	}
	remaining := []ScheduledPod{byPod["p-mps"]}
	if diff := cmp.Diff(claimUIDs(remaining), n.specClaims(t)); diff != "" {
		t.Errorf("after the update, CDI specs (-claims kubelet has prepared +spec files):\n%s", diff)
	}
	if _, err := WaitForPool(ctx, n.Spec.Name); err != nil {
		t.Errorf("after the old plugin stopped: %v", err)
	}
	if _, err := n.prepare(ctx, byPod["p-mps"].Claims...); err != nil {
		t.Errorf("prepare p-mps again after the update: %v", err)
	}
	unprepareAll(t, n, ns, remaining)
}
