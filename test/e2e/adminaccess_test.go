package e2e

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// TestAdminAccessToBusyGPUChangesNothing: in a namespace labelled for admin access, the real
// scheduler gives an admin-access claim the GPU a time-sliced workload claim holds; the driver
// prepares it (CDI IDs for the same GPU) although the admin claim asks for MPS, and the node's
// host settings stay as the workload set them, prepared and unprepared.
func TestAdminAccessToBusyGPUChangesNothing(t *testing.T) {
	ctx := context.Background()
	n := suite.StartNode(t, NodeSpec{Name: "admin-l4", Machine: "l4x8"})
	ns := shortName("admin", n.Spec.Name)
	if err := adminNamespace(ctx, ns, n.Spec.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteNamespace(context.Background(), ns); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	third := "device.attributes['gpu.nvidia.com'].index == 3"
	work := claimSpec("work", "gpu.nvidia.com", third, map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
		"sharing": map[string]any{"strategy": "TimeSlicing", "timeSlicingConfig": map[string]any{"interval": "Long"}}})
	admin := claimSpec("admin", "gpu.nvidia.com", third, map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
		"sharing": map[string]any{"strategy": "MPS"}})
	admin.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	for _, c := range []*resourceapi.ResourceClaim{work, admin} {
		if _, err := suite.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := suite.Client.CoreV1().Pods(ns).Create(ctx, podUsing("work", "work"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	workPods, err := waitScheduled(ctx, ns, 1, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.prepare(ctx, workPods[0].Claims...); err != nil {
		t.Fatal(err)
	}
	before, err := n.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := suite.Client.CoreV1().Pods(ns).Create(ctx, podUsing("monitor", "admin"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := waitScheduled(ctx, ns, 2, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	adminClaim := pods[0].Claims[0] // "monitor" sorts before "work"
	got, want := adminClaim.Status.Allocation.Devices.Results[0], workPods[0].Claims[0].Status.Allocation.Devices.Results[0]
	if got.Device != want.Device || !ptr.Deref(got.AdminAccess, false) {
		t.Fatalf("admin claim got %s (adminAccess %v), want the workload's %s", got.Device, got.AdminAccess, want.Device)
	}
	slices, err := Slices(ctx, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := n.prepare(ctx, adminClaim)
	if err != nil {
		t.Fatalf("prepare the admin claim: %v", err)
	}
	if err := n.checkPrepared(resp, []*resourceapi.ResourceClaim{adminClaim}, Devices(slices)); err != nil {
		t.Error(err)
	}
	for _, step := range []string{"prepared", "unprepared"} {
		if step == "unprepared" {
			if err := n.unprepare(ctx, adminClaim); err != nil {
				t.Fatal(err)
			}
		}
		after, err := n.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("admin claim %s changed the node (-before +after):\n%s", step, diff)
		}
	}
	if err := deletePods(ctx, ns, "work", "monitor"); err != nil {
		t.Fatal(err)
	}
	if err := n.unprepare(ctx, workPods[0].Claims...); err != nil {
		t.Fatal(err)
	}
	n.checkClean(t)
}

// adminNamespace creates a namespace where claims may ask for admin access (the API server
// requires the label) and whose pods go to node.
func adminNamespace(ctx context.Context, name, node string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{resourceapi.DRAAdminNamespaceLabelKey: "true"},
		Annotations: map[string]string{"scheduler.alpha.kubernetes.io/node-selector": corev1.LabelHostname + "=" + node}}}
	if _, err := suite.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return framework.WaitForServiceAccount(ctx, suite.Client, name, "default")
}
