package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	cdcontroller "github.com/gpudra/gpudra/computedomain/controller"
	"github.com/gpudra/gpudra/test/e2e/framework"
)

// chartValueSets are value files a platform team would plausibly install with.
var chartValueSets = map[string]map[string]any{
	"defaults":        nil,
	"dynamic-mig":     {"dynamicMIG": true, "nvidiaDriverRoot": "/run/nvidia/driver"},
	"consumable":      {"consumableMemory": true, "sharingStrategies": []any{"MPS"}},
	"exclusive":       {"sharingStrategies": []any{}, "kubeletDir": "/var/lib/k0s/kubelet", "nodeSelector": map[string]any{"gpu": "yes"}},
	"fake-machine":    {"fakeMachine": map[string]any{"name": "l4x8"}},
	"extended-res":    extendedValues,
	"compute-domains": {"computeDomains": map[string]any{"enabled": true, "readyTimeout": "45s"}, "nvidiaDriverRoot": "/run/nvidia/driver"},
}

// TestChartLint runs helm lint --strict on the chart with each value set.
func TestChartLint(t *testing.T) {
	dir := filepath.Join(suite.Repo, chartPath)
	for name, vals := range chartValueSets {
		t.Run(name, func(t *testing.T) {
			if err := framework.LintChart(dir, suite.Bins.KubernetesVersion, framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: vals}); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestChartRendersValidObjects renders the chart with each value set and has the API server
// validate every object (server-side dry run), so values that produce invalid manifests fail.
func TestChartRendersValidObjects(t *testing.T) {
	for name, vals := range chartValueSets {
		t.Run(name, func(t *testing.T) {
			objs, err := framework.RenderChart(filepath.Join(suite.Repo, chartPath), suite.Bins.KubernetesVersion,
				framework.Release{Name: "dry-" + name, Namespace: releaseNamespace, Values: vals})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if err := suite.Applier.DryRun(context.Background(), releaseNamespace, o); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestChartDeviceClassesMatchManifest: the chart's DeviceClasses are the ones the compatibility
// contract names (examples/deploy/deviceclasses.yaml).
func TestChartDeviceClassesMatchManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(suite.Repo, "examples/deploy/deviceclasses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := framework.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	specs := func(objs []*unstructured.Unstructured) map[string]any {
		out := map[string]any{}
		for _, o := range objs {
			if o.GetKind() == "DeviceClass" {
				out[o.GetName()] = o.Object["spec"]
			}
		}
		return out
	}
	if diff := cmp.Diff(specs(want), specs(suite.Objects)); diff != "" {
		t.Errorf("chart DeviceClasses differ from examples/deploy/deviceclasses.yaml (-manifest +chart):\n%s", diff)
	}
}

// TestChartDaemonSetRunsOnGPUNodesOnly: the DaemonSet controller puts a plugin pod on every
// node with the chart's GPU label and none elsewhere.
func TestChartDaemonSetRunsOnGPUNodesOnly(t *testing.T) {
	ctx := context.Background()
	gpu := suite.StartNode(t, NodeSpec{Name: "ds-gpu", Machine: "l4x8"})
	if _, err := framework.CreateReadyNode(ctx, suite.Client, "ds-cpu", nil); err != nil {
		t.Fatal(err)
	}
	sel := metav1.FormatLabelSelector(suite.DaemonSet.Spec.Selector)
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := suite.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		var onGPU bool
		for _, p := range pods.Items {
			node := nodeOfDaemonPod(&p)
			if node == "ds-cpu" {
				return false, fmt.Errorf("plugin pod %s targets the node without GPUs", p.Name)
			}
			onGPU = onGPU || node == gpu.Spec.Name
		}
		last = fmt.Sprintf("%d plugin pods, one on %s: %v", len(pods.Items), gpu.Spec.Name, onGPU)
		return onGPU, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", last, err)
	}
}

// nodeOfDaemonPod is the node a DaemonSet pod is for: bound, or required by its affinity.
func nodeOfDaemonPod(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

// TestChartSharingStrategies: with sharingStrategies [MPS], the DaemonSet's driver refuses a
// time-slicing claim at prepare with an error naming the setting, changes nothing, and still
// prepares MPS. (Its MPS daemon runs in the driver's process: this tier's fake kubelet runs no
// daemon pods.)
func TestChartSharingStrategies(t *testing.T) {
	ctx := context.Background()
	objs, err := framework.RenderChart(filepath.Join(suite.Repo, chartPath), suite.Bins.KubernetesVersion,
		framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: map[string]any{
			"fakeMachine": map[string]any{"name": "l4x8"}, "sharingStrategies": []any{"MPS"}, "mpsDaemonPods": false}})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := framework.DaemonSetFrom(objs)
	if err != nil {
		t.Fatal(err)
	}
	n := suite.StartNode(t, NodeSpec{Name: "strategies", Machine: "l4x8", DaemonSet: ds})
	const ns = "strategies"
	createPodsWithClaims(t, n, ns,
		[]*resourceapi.ResourceClaim{claimSpec("ts", "gpu.nvidia.com", "", timeSlicingLong), claimSpec("mps", "gpu.nvidia.com", "", mpsConfig)},
		podUsing("p-ts", "ts"), podUsing("p-mps", "mps"))
	pods, err := waitScheduled(ctx, ns, 2, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		c := p.Claims[0]
		resp, err := n.Kubelet.Prepare(ctx, kubeletClaims(c)...)
		if err != nil {
			t.Fatal(err)
		}
		msg := resp.Claims[string(c.UID)].GetError()
		switch c.Name {
		case "ts":
			if !strings.Contains(msg, "TimeSlicing is not allowed") || !strings.Contains(msg, "MPS") {
				t.Errorf("time-slicing claim: prepare error %q, want TimeSlicing refused naming what is allowed (MPS)", msg)
			}
		case "mps":
			if msg != "" {
				t.Errorf("MPS claim: %s", msg)
			}
		}
	}
	if err := deletePods(ctx, ns, "p-ts", "p-mps"); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if err := n.unprepare(ctx, p.Claims...); err != nil {
			t.Error(err)
		}
	}
	n.checkClean(t)
}

// chartClusterRole is the chart's ClusterRole.
func chartClusterRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	for _, o := range suite.Objects {
		if o.GetKind() == "ClusterRole" {
			cr := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cr); err != nil {
				t.Fatal(err)
			}
			return cr
		}
	}
	t.Fatal("the chart renders no ClusterRole")
	return nil
}

// withoutVerb is rules with verb removed from rule i (and the rule dropped when empty).
func withoutVerb(rules []rbacv1.PolicyRule, i int, verb string) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	for j, r := range rules {
		r = *r.DeepCopy()
		if j == i {
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == verb })
			if len(r.Verbs) == 0 {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// TestChartRBACEveryRuleIsNeeded runs the driver's API work (publish its pool and remove a
// stale slice of it, republish on an XID, recreate a slice deleted behind its back, prepare a
// claim) once with the chart's ClusterRole and once for every verb of every rule with that
// verb removed. The full role must pass; every reduced role must fail, so the chart grants
// nothing the driver does not use. Each variant has its own ServiceAccount and node.
func TestChartRBACEveryRuleIsNeeded(t *testing.T) {
	role := chartClusterRole(t)
	type variant struct {
		name  string
		rules []rbacv1.PolicyRule
	}
	variants := []variant{{"full", role.Rules}}
	for i, r := range role.Rules {
		for _, v := range r.Verbs {
			name := fmt.Sprintf("no-%s-%s", v, strings.Join(r.Resources, "-"))
			variants = append(variants, variant{name, withoutVerb(role.Rules, i, v)})
		}
	}
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			sa := shortName("rbac", fmt.Sprint(i))
			if err := grant(context.Background(), sa, v.rules); err != nil {
				t.Fatal(err)
			}
			var env []string
			if v.name == "no-list-resourceslices" {
				// client-go 1.37 fills informers with a streaming watch (WatchListClient)
				// and lists only where the API server cannot stream, as the client does
				// with this gate off.
				env = []string{"KUBE_FEATURE_WatchListClient=false"}
			}
			err := driverAPIWork(t, shortName("rbac", fmt.Sprint(i), "node"), sa, env, v.name != "full")
			switch {
			case v.name == "full" && err != nil:
				t.Errorf("with the chart's ClusterRole: %v", err)
			case v.name != "full" && err == nil:
				t.Errorf("the driver did all its API work without this permission: the chart should not grant it")
			case err != nil:
				t.Logf("fails as it should: %v", err)
			}
		})
	}
}

// grant creates ServiceAccount sa in the release namespace bound to a ClusterRole with rules.
func grant(ctx context.Context, sa string, rules []rbacv1.PolicyRule) error {
	c := suite.Client
	if _, err := c.CoreV1().ServiceAccounts(releaseNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	name := "e2e-" + sa
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: releaseNamespace}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
	}, metav1.CreateOptions{})
	return err
}

// driverAPIWork starts a driver as ServiceAccount sa on a new node and returns the first API
// task it fails at (each with a short deadline), or nil. A driver with reduced permissions may
// fail to stop cleanly (it never finished starting).
func driverAPIWork(t *testing.T, node, sa string, env []string, reduced bool) error {
	ctx := context.Background()
	w := &apiWork{t: t, node: node, stale: node + "-stale"}
	if err := w.createStaleSlice(ctx); err != nil {
		t.Fatal(err)
	}
	w.n = suite.StartNode(t, NodeSpec{Name: node, Machine: "l4x8", ServiceAccount: sa, NoWaitForSlices: true, Env: env, StopMayFail: reduced})
	if w.n.StartErr != nil {
		// serve reads its Node before it serves (the device-plugin guard): without the
		// permission it refuses to start.
		return fmt.Errorf("the driver did not start: %w", w.n.StartErr)
	}
	for _, step := range []func(context.Context) error{w.publish, w.republishOnXID, w.repairDeletedSlice, w.prepare, w.noForbiddenCalls} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// apiWork is what the driver does with the API server, step by step.
type apiWork struct {
	t     *testing.T
	n     *TestNode
	node  string
	stale string
	pool  []resourceapi.ResourceSlice
}

// createStaleSlice leaves a slice of an older generation in the node's pool, as a driver
// version that published other devices would.
func (w *apiWork) createStaleSlice(ctx context.Context) error {
	_, err := suite.Client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: w.stale},
		Spec: resourceapi.ResourceSliceSpec{Driver: driverName, NodeName: ptr.To(w.node),
			Pool:    resourceapi.ResourcePool{Name: w.node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "stale-device"}}},
	}, metav1.CreateOptions{})
	return err
}

// publish: the pool appears (list/watch, get node, create) and the stale slice goes (delete).
func (w *apiWork) publish(ctx context.Context) error {
	return pollFor(ctx, 20*time.Second, "publish the pool and delete the stale slice", func(ctx context.Context) (bool, error) {
		all, err := Slices(ctx, w.node)
		if err != nil {
			return false, err
		}
		w.pool, _ = completePool(all)
		return w.pool != nil && len(Devices(w.pool)) == 8 && !slices.ContainsFunc(all, func(s resourceapi.ResourceSlice) bool { return s.Name == w.stale }), nil
	})
}

// republishOnXID: an XID taints a device (update).
func (w *apiWork) republishOnXID(ctx context.Context) error {
	if err := w.n.InjectXID(ctx, 1, 79); err != nil {
		return err
	}
	return pollFor(ctx, 20*time.Second, "republish with a taint after an XID", func(ctx context.Context) (bool, error) {
		all, err := Slices(ctx, w.node)
		if err != nil {
			return false, err
		}
		p, _ := completePool(all)
		return len(Devices(p)["gpu-1"].Taints) > 0, nil
	})
}

// repairDeletedSlice: a slice deleted by someone else comes back (watch, create). The slice
// controller repairs its pool resourceslice.DefaultSyncDelay (30s) after a foreign change.
func (w *apiWork) repairDeletedSlice(ctx context.Context) error {
	err := suite.Client.ResourceV1().ResourceSlices().Delete(ctx, w.pool[0].Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return pollFor(ctx, 45*time.Second, "recreate a slice deleted behind the driver's back", func(ctx context.Context) (bool, error) {
		all, err := Slices(ctx, w.node)
		if err != nil {
			return false, err
		}
		p, _ := completePool(all)
		return len(Devices(p)) == 8, nil
	})
}

// prepare: a pod's claim is prepared and unprepared (get resourceclaims).
func (w *apiWork) prepare(ctx context.Context) error {
	ns := shortName("ns", w.node)
	createPodsWithClaims(w.t, w.n, ns, []*resourceapi.ResourceClaim{claimSpec("c", "gpu.nvidia.com", "", nil)}, podUsing("p", "c"))
	pods, err := waitScheduled(ctx, ns, 1, w.node)
	if err != nil {
		return err
	}
	if _, err := w.n.prepare(ctx, pods[0].Claims...); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if _, err := deviceStatusOf(ctx, pods[0].Claims[0], "the prepared device described in status.devices", func(d []resourceapi.AllocatedDeviceStatus) bool { return len(d) == 1 }); err != nil {
		return err
	}
	return errors.Join(deletePods(ctx, ns, "p"), w.n.unprepare(ctx, pods[0].Claims...))
}

// noForbiddenCalls: what degrades rather than fails (a forbidden watch makes the informer
// relist with backoff) still shows in the driver's log.
func (w *apiWork) noForbiddenCalls(context.Context) error {
	log := w.n.Driver.Proc.Tail(1 << 20)
	if i := strings.Index(log, "forbidden"); i >= 0 {
		return fmt.Errorf("the driver's log reports a forbidden API call: %s", log[max(0, i-300):min(len(log), i+100)])
	}
	return nil
}

func pollFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// TestChartComputeDomains (issue 31): with computeDomains.enabled the chart's ClusterRole of the
// ComputeDomain controller grants exactly computedomain/controller.Rules(), and its two
// DeviceClasses are examples/deploy/computedomain/deviceclasses.yaml's, the contract's names and
// selectors; without it the chart renders none of the ComputeDomain objects.
func TestChartComputeDomains(t *testing.T) {
	render := func(vals map[string]any) []*unstructured.Unstructured {
		t.Helper()
		objs, err := framework.RenderChart(filepath.Join(suite.Repo, chartPath), suite.Bins.KubernetesVersion,
			framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	for _, o := range render(nil) {
		if strings.Contains(o.GetName(), "compute-domain") {
			t.Errorf("the default chart renders %s %s; ComputeDomains are opt-in", o.GetKind(), o.GetName())
		}
	}
	objs := render(chartValueSets["compute-domains"])
	var role *rbacv1.ClusterRole
	classes := map[string]any{}
	for _, o := range objs {
		switch {
		case o.GetKind() == "ClusterRole" && strings.HasSuffix(o.GetName(), "-compute-domain-controller"):
			role = &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
				t.Fatal(err)
			}
		case o.GetKind() == "DeviceClass" && strings.HasPrefix(o.GetName(), "compute-domain"):
			classes[o.GetName()] = o.Object["spec"]
		}
	}
	if role == nil {
		t.Fatal("no ClusterRole of the ComputeDomain controller rendered")
	}
	if diff := cmp.Diff(cdcontroller.Rules(), role.Rules, cmpopts.SortSlices(func(a, b rbacv1.PolicyRule) bool { return a.String() < b.String() })); diff != "" {
		t.Errorf("the chart's controller ClusterRole differs from controller.Rules() (-Rules +chart):\n%s", diff)
	}
	data, err := os.ReadFile(filepath.Join(suite.Repo, "examples/deploy/computedomain/deviceclasses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := framework.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	wantClasses := map[string]any{}
	for _, o := range want {
		wantClasses[o.GetName()] = o.Object["spec"]
	}
	if diff := cmp.Diff(wantClasses, classes); diff != "" {
		t.Errorf("chart ComputeDomain DeviceClasses differ from examples/deploy/computedomain/deviceclasses.yaml (-manifest +chart):\n%s", diff)
	}
}
