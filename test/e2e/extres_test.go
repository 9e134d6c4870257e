package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/deviceplugin"
	"github.com/gpudra/gpudra/test/e2e/framework"
)

// extendedValues turns on the chart's extended-resource classes for two MIG profiles.
var extendedValues = map[string]any{"extendedResources": map[string]any{"enabled": true, "migProfiles": []any{"1g.10gb", "1g.10gb+me"}}}

// extendedClasses are the classes deviceplugin.Convert makes of a device plugin config with
// migStrategy mixed and the chart's profiles: what the chart must render.
func extendedClasses(t *testing.T) []*resourceapi.DeviceClass {
	t.Helper()
	mixed := deviceplugin.MigStrategyMixed
	res, err := deviceplugin.Convert(&deviceplugin.Config{Flags: deviceplugin.Flags{MigStrategy: &mixed}},
		deviceplugin.WithMIGProfiles("1g.10gb", "1g.10gb+me"))
	if err != nil {
		t.Fatal(err)
	}
	return res.Classes
}

// TestChartExtendedResourceClassesMatchConverter: with extendedResources.enabled the chart
// renders exactly the classes the library converts a mixed-strategy device plugin config into;
// by default it renders none (the shipped classes stay as the compatibility contract says).
func TestChartExtendedResourceClassesMatchConverter(t *testing.T) {
	objs, err := framework.RenderChart(filepath.Join(suite.Repo, chartPath), suite.Bins.KubernetesVersion,
		framework.Release{Name: "extres", Namespace: releaseNamespace, Values: extendedValues})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	for _, c := range extendedClasses(t) {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			t.Fatal(err)
		}
		want[c.Name] = u["spec"]
	}
	if diff := cmp.Diff(want, extendedClassSpecs(objs)); diff != "" {
		t.Errorf("chart extended-resource classes differ from deviceplugin.Convert (-library +chart):\n%s", diff)
	}
	if got := extendedClassSpecs(suite.Objects); len(got) != 0 {
		t.Errorf("the chart's defaults render classes with an extendedResourceName: %v", got)
	}
}

// extendedClassSpecs are the specs of the DeviceClasses with an extendedResourceName, by name.
func extendedClassSpecs(objs []*unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	for _, o := range objs {
		if _, found, _ := unstructured.NestedString(o.Object, "spec", "extendedResourceName"); found && o.GetKind() == "DeviceClass" {
			out[o.GetName()] = o.Object["spec"]
		}
	}
	return out
}

// TestExtendedResourcePodsScheduledThroughDRA: with the converted classes installed, unchanged
// pods asking for nvidia.com/gpu: 1 and nvidia.com/mig-1g.10gb: 1 (no claim in their spec) are
// scheduled by the real scheduler on a node this driver serves: the scheduler creates a claim
// per pod, allocates it a full GPU or a 1g.10gb MIG device and records it in the pod's
// status.extendedResourceClaimStatus; the driver prepares those claims as kubelet asks. A pod on
// a node where the device plugin still advertises nvidia.com/gpu gets it from the device plugin:
// no claim.
func TestExtendedResourcePodsScheduledThroughDRA(t *testing.T) {
	ctx := context.Background()
	createClasses(t, extendedClasses(t))
	n := suite.StartNode(t, NodeSpec{Name: "extres", Machine: "dgx-a100-80gb", MIGConfig: mixedMIGConfig(t)})
	ns := shortName("extres", n.Spec.Name)
	createPodsWithClaims(t, n, ns, nil,
		podAsking("legacy-gpu", "nvidia.com/gpu"), podAsking("legacy-mig", "nvidia.com/mig-1g.10gb"))
	pods, err := waitExtendedScheduled(ctx, ns, n.Spec.Name, "legacy-gpu", "legacy-mig")
	if err != nil {
		t.Fatal(err)
	}
	slices, err := Slices(ctx, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := Devices(slices)
	wantDevice := map[string]string{"legacy-gpu": "gpu", "legacy-mig": "1g.10gb"}
	for _, p := range pods {
		checkExtendedClaim(t, p, pool, wantDevice[p.Pod.Name])
		resp, err := n.prepare(ctx, p.Claims...)
		if err != nil {
			t.Fatalf("prepare the extended-resource claim of pod %s: %v", p.Pod.Name, err)
		}
		if err := n.checkPrepared(resp, p.Claims, pool); err != nil {
			t.Errorf("pod %s: %v", p.Pod.Name, err)
		}
	}
	if err := deletePods(ctx, ns, "legacy-gpu", "legacy-mig"); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if err := n.unprepare(ctx, p.Claims...); err != nil {
			t.Errorf("unprepare the claim of pod %s: %v", p.Pod.Name, err)
		}
	}
	n.checkClean(t)
	devicePluginNodeKeepsItsPods(t)
}

// devicePluginNodeKeepsItsPods: on a node whose status.allocatable has nvidia.com/gpu (a device
// plugin advertises it), a pod asking for it is scheduled by node resources, with no claim,
// although a class maps the resource.
func devicePluginNodeKeepsItsPods(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	node, err := framework.CreateReadyNode(ctx, suite.Client, "extres-dp", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = suite.Client.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := suite.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity["nvidia.com/gpu"] = resource.MustParse("2")
		cur.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("2")
		_, err = suite.Client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ns := shortName("extres-dp")
	createPodsWithClaims(t, &TestNode{Spec: NodeSpec{Name: node.Name}}, ns, nil, podAsking("dp-gpu", "nvidia.com/gpu"))
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := suite.Client.CoreV1().Pods(ns).Get(ctx, "dp-gpu", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("node %q, conditions %s", p.Spec.NodeName, podConditions(p))
		return p.Spec.NodeName == node.Name, nil
	})
	if err != nil {
		t.Fatalf("pod on the device plugin's node: %s: %v", last, err)
	}
	p, err := suite.Client.CoreV1().Pods(ns).Get(ctx, "dp-gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := suite.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.ExtendedResourceClaimStatus != nil || len(claims.Items) != 0 {
		t.Errorf("pod on the device plugin's node got a DRA claim (%+v, %d claims): DRA and the device plugin would share its GPUs",
			p.Status.ExtendedResourceClaimStatus, len(claims.Items))
	}
	cur, err := suite.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := deviceplugin.CheckNode(cur); err == nil {
		t.Error("deviceplugin.CheckNode lets a driver publish on the device plugin's node")
	}
}

// mixedMIGConfig is a mig-parted file for dgx-a100-80gb as the device plugin's mixed strategy
// serves it: GPUs 0 and 1 in seven 1g.10gb instances, the others whole.
func mixedMIGConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mixed.yaml")
	data := `version: v1
mig-configs:
  mixed:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
    - devices: [2, 3, 4, 5, 6, 7]
      mig-enabled: false
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// createClasses creates DeviceClasses for the test and deletes them when it ends.
func createClasses(t *testing.T, classes []*resourceapi.DeviceClass) {
	t.Helper()
	ctx := context.Background()
	for _, c := range classes {
		if _, err := suite.Client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := c.Name
		t.Cleanup(func() {
			err := suite.Client.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete DeviceClass %s: %v", name, err)
			}
		})
	}
}

// podAsking is a pod whose one container asks for one of an extended resource, as pods written
// for the device plugin do: a limit, no claim.
func podAsking(name, resourceName string) *corev1.Pod {
	p := podUsing(name)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(resourceName): resource.MustParse("1")}
	return p
}

// waitExtendedScheduled waits until the pods are bound to node with the claim the scheduler
// created for their extended resources allocated and reserved for them.
func waitExtendedScheduled(ctx context.Context, ns, node string, names ...string) ([]ScheduledPod, error) {
	var out []ScheduledPod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		out, last = nil, ""
		for _, name := range names {
			p, err := suite.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			st := p.Status.ExtendedResourceClaimStatus
			if p.Spec.NodeName != node || st == nil {
				last = fmt.Sprintf("pod %s: node %q, extendedResourceClaimStatus %+v, conditions %s", name, p.Spec.NodeName, st, podConditions(p))
				return false, nil
			}
			c, err := suite.Client.ResourceV1().ResourceClaims(ns).Get(ctx, st.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				last = fmt.Sprintf("pod %s: claim %s: %v", name, st.ResourceClaimName, err)
				return false, nil
			}
			if !reservedFor(c, p) {
				last = fmt.Sprintf("claim %s not allocated and reserved for pod %s", c.Name, name)
				return false, nil
			}
			out = append(out, ScheduledPod{Pod: p, Claims: []*resourceapi.ResourceClaim{c}})
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %s: %w", ns, last, err)
	}
	return out, nil
}

// checkExtendedClaim checks the claim the scheduler made for a pod's extended resource: marked
// and owned as KEP-5004 says, one request mapped to the pod's container, allocated one device
// of the wanted type ("gpu") or MIG profile from the node's pool.
func checkExtendedClaim(t *testing.T, p ScheduledPod, pool map[string]resourceapi.Device, want string) {
	t.Helper()
	c := p.Claims[0]
	if c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != p.Pod.UID {
		t.Errorf("claim %s of pod %s: annotations %v, owners %+v", c.Name, p.Pod.Name, c.Annotations, c.OwnerReferences)
	}
	mappings := p.Pod.Status.ExtendedResourceClaimStatus.RequestMappings
	var resourceName corev1.ResourceName
	for name := range p.Pod.Spec.Containers[0].Resources.Limits {
		resourceName = name
	}
	wantMappings := []corev1.ContainerExtendedResourceRequest{{ContainerName: "ctr", ResourceName: string(resourceName), RequestName: c.Spec.Devices.Requests[0].Name}}
	if diff := cmp.Diff(wantMappings, mappings); diff != "" || len(c.Spec.Devices.Requests) != 1 {
		t.Errorf("pod %s: request mappings (-want +got):\n%s", p.Pod.Name, diff)
	}
	results := c.Status.Allocation.Devices.Results
	if len(results) != 1 || results[0].Driver != driverName || results[0].Pool != p.Pod.Spec.NodeName {
		t.Fatalf("claim %s of pod %s: results %+v, want one device of %s in pool %s", c.Name, p.Pod.Name, results, driverName, p.Pod.Spec.NodeName)
	}
	d := pool[results[0].Device]
	got := ptr.Deref(d.Attributes["type"].StringValue, "")
	if got == "mig" {
		got = ptr.Deref(d.Attributes["profile"].StringValue, "")
	}
	if got != want {
		t.Errorf("pod %s asking %s got device %s (%s), want a %s", p.Pod.Name, resourceName, results[0].Device, got, want)
	}
	t.Logf("pod %s (%s: 1) → claim %s → device %s (%s)", p.Pod.Name, resourceName, c.Name, results[0].Device, got)
}
