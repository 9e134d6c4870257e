package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// extraSlice is a one-device slice of its own pool on node, so the driver's pool is untouched.
func extraSlice(name, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: driverName, NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "d"}}},
	}
}

// otherDriverSlice is extraSlice of another driver than the chart's.
func otherDriverSlice(name, node string) *resourceapi.ResourceSlice {
	s := extraSlice(name, node)
	s.Spec.Driver = "compute-domain.nvidia.com"
	return s
}

// pluginClient is a client authenticated as the chart's ServiceAccount with a token bound to
// the DaemonSet pod of node ("" for a token bound to no pod).
func pluginClient(t *testing.T, node string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	var token string
	var err error
	if node == "" {
		token, err = framework.ServiceAccountToken(ctx, suite.Client, releaseNamespace, suite.ServiceAccount, nil)
	} else {
		pod, perr := suite.daemonSetPod(ctx, node)
		if perr != nil {
			t.Fatal(perr)
		}
		token, err = framework.ServiceAccountToken(ctx, suite.Client, releaseNamespace, suite.ServiceAccount, pod)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(suite.CP.Admin)
	cfg.TLSClientConfig = rest.TLSClientConfig{CAFile: suite.CP.CAFile}
	cfg.BearerToken = token
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestChartSlicePolicyConfinesPluginToItsNode: with the chart's ServiceAccount, the plugin pod
// of node A may create and delete ResourceSlices of node A but not create, update or delete
// those of node B, nor create a slice of another driver on node A, and a token bound to no pod
// may change none; with the chart's ValidatingAdmissionPolicyBinding removed, A's token can
// write B's slices and another driver's (RBAC alone does not stop it), so the policy is what
// confines it.
func TestChartSlicePolicyConfinesPluginToItsNode(t *testing.T) {
	ctx := context.Background()
	suite.StartNode(t, NodeSpec{Name: "pol-a", Machine: "l4x8"})
	suite.StartNode(t, NodeSpec{Name: "pol-b", Machine: "l4x8"})
	a := pluginClient(t, "pol-a")
	slicesB, err := Slices(ctx, "pol-b")
	if err != nil || len(slicesB) == 0 {
		t.Fatalf("node pol-b's slices: %v (%d)", err, len(slicesB))
	}
	rs := a.ResourceV1().ResourceSlices()
	if _, err := rs.Create(ctx, extraSlice("pol-a-own", "pol-a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("plugin of pol-a creating a slice of pol-a: %v", err)
	}
	if err := rs.Delete(ctx, "pol-a-own", metav1.DeleteOptions{}); err != nil {
		t.Errorf("plugin of pol-a deleting a slice of pol-a: %v", err)
	}
	denied := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a denial mentioning %q", what, err, want)
		}
	}
	_, err = rs.Create(ctx, extraSlice("pol-b-foreign", "pol-b"), metav1.CreateOptions{})
	denied("plugin of pol-a creating a slice of pol-b", err, "may only change ResourceSlices of that node")
	victim := slicesB[0].DeepCopy()
	victim.Spec.Devices = victim.Spec.Devices[:1]
	_, err = rs.Update(ctx, victim, metav1.UpdateOptions{})
	denied("plugin of pol-a updating a slice of pol-b", err, "may only change ResourceSlices of that node")
	denied("plugin of pol-a deleting a slice of pol-b", rs.Delete(ctx, victim.Name, metav1.DeleteOptions{}), "may only change ResourceSlices of that node")
	_, err = pluginClient(t, "").ResourceV1().ResourceSlices().Create(ctx, extraSlice("pol-a-unbound", "pol-a"), metav1.CreateOptions{})
	denied("a token bound to no pod creating a slice", err, "names no node")
	_, err = rs.Create(ctx, otherDriverSlice("pol-a-other-driver", "pol-a"), metav1.CreateOptions{})
	denied("plugin of pol-a creating a slice of another driver on pol-a", err, "may only change ResourceSlices of driver "+driverName)

	withoutPolicyBinding(t, func() {
		if _, err := rs.Create(ctx, extraSlice("pol-b-unguarded", "pol-b"), metav1.CreateOptions{}); err != nil {
			t.Errorf("without the policy, RBAC alone should let the plugin of pol-a write pol-b's slices (or the policy test proves nothing): %v", err)
		}
		_ = suite.Client.ResourceV1().ResourceSlices().Delete(ctx, "pol-b-unguarded", metav1.DeleteOptions{})
		if _, err := rs.Create(ctx, otherDriverSlice("pol-a-other-unguarded", "pol-a"), metav1.CreateOptions{}); err != nil {
			t.Errorf("without the policy, RBAC alone should let the plugin of pol-a write another driver's slices (or the policy test proves nothing): %v", err)
		}
		_ = suite.Client.ResourceV1().ResourceSlices().Delete(ctx, "pol-a-other-unguarded", metav1.DeleteOptions{})
	})
}

// withoutPolicyBinding runs fn with the chart's ValidatingAdmissionPolicyBinding deleted, then
// applies it again and waits until it denies again.
func withoutPolicyBinding(t *testing.T, fn func()) {
	t.Helper()
	ctx := context.Background()
	var binding *unstructured.Unstructured
	for _, o := range suite.Objects {
		if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
			binding = o
		}
	}
	if binding == nil {
		t.Fatal("the chart renders no ValidatingAdmissionPolicyBinding")
	}
	if err := suite.Applier.Delete(ctx, "", 0, binding); err != nil {
		t.Fatal(err)
	}
	probe := pluginClient(t, "pol-a").ResourceV1().ResourceSlices()
	enforced := func(want bool) error {
		return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := probe.Create(ctx, extraSlice("pol-probe", "pol-b"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return (err != nil) == want, nil
		})
	}
	if err := enforced(false); err != nil {
		t.Fatalf("the policy still denies after its binding was deleted: %v", err)
	}
	defer func() {
		if err := suite.Applier.Apply(ctx, "", binding); err != nil {
			t.Fatal(err)
		}
		if err := enforced(true); err != nil {
			t.Fatal(fmt.Errorf("the policy does not deny again after its binding was restored: %w", err))
		}
	}()
	fn()
}
