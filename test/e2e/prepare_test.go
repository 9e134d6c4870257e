package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/draplugin"
)

// claimSpec is a claim with one request of class, an optional CEL selector and an optional
// opaque driver config.
func claimSpec(name, class, selector string, config map[string]any) *resourceapi.ResourceClaim {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	if selector != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}
	if config != nil {
		raw, _ := json.Marshal(config)
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: driverName, Parameters: runtime.RawExtension{Raw: raw}}},
		}}
	}
	return c
}

// podUsing is a pod whose one container uses the named claims.
func podUsing(name string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ctr", Image: "registry.k8s.io/pause:3.10"}}},
	}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: c})
	}
	return p
}

// createPodsWithClaims creates claims and pods in a new namespace pinned to n and returns
// the namespace; it is deleted when t ends.
func createPodsWithClaims(t testing.TB, n *TestNode, ns string, claims []*resourceapi.ResourceClaim, pods ...*corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if err := newWorkloadNamespace(ctx, ns, n.Spec.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteNamespace(context.Background(), ns); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	for _, c := range claims {
		if _, err := suite.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		if _, err := suite.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPrepareUnprepareThroughSockets acts as kubelet on a dynamic-MIG node: registration
// (GetInfo, NotifyRegistrationStatus), then NodePrepareResources for a pod's 3g.40gb claim
// creates the MIG instance and a CDI spec whose IDs inject the GPU and its MIG capability
// nodes; a second prepare answers the same; NodeUnprepareResources after the pod is deleted
// removes the spec and the instance; then a claim for the whole GPU gets it out of MIG mode.
func TestPrepareUnprepareThroughSockets(t *testing.T) {
	ctx := context.Background()
	n := suite.StartNode(t, NodeSpec{Name: "prep-dyn", Machine: "dgx-a100-80gb", DynamicMIG: true})

	info := n.Kubelet.Info
	pluginDir := n.Driver.ArgValue("--plugin-dir")
	if info.Type != registerapi.DRAPlugin || info.Name != driverName || filepath.Dir(info.Endpoint) != pluginDir ||
		!slices.Contains(info.SupportedVersions, drapbv1.DRAPluginService) {
		t.Errorf("GetInfo = %+v; want a %s plugin named %s with a socket in %s speaking %s", info, registerapi.DRAPlugin, driverName, pluginDir, drapbv1.DRAPluginService)
	}

	const ns = "prep"
	claim := claimSpec("mig-3g", "mig.nvidia.com", `device.attributes['gpu.nvidia.com'].profile == '3g.40gb'`, nil)
	createPodsWithClaims(t, n, ns, []*resourceapi.ResourceClaim{claim}, podUsing("p", "mig-3g"))
	pods, err := waitScheduled(ctx, ns, 1, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	c := pods[0].Claims[0]
	pool, err := WaitForPool(ctx, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := n.prepare(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.checkPrepared(resp, pods[0].Claims, Devices(pool)); err != nil {
		t.Error(err)
	}
	dev := Devices(pool)[c.Status.Allocation.Devices.Results[0].Device]
	parent, _ := gpuMinor(dev)
	st, err := n.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := instanceProfiles(st, int(parent)); !slices.Equal(got, []string{"3g.40gb"}) {
		t.Errorf("after prepare, GPU %d has MIG instances %v, want the claimed 3g.40gb", parent, got)
	}
	checkDeviceStatus(ctx, t, c, resp)
	again, err := n.prepare(ctx, c)
	if err != nil {
		t.Fatalf("second prepare: %v", err)
	}
	if diff := cmp.Diff(resp, again, protocmp.Transform()); diff != "" {
		t.Errorf("second prepare answered differently (-first +second):\n%s", diff)
	}
	if err := deletePods(ctx, ns, pods[0].Pod.Name); err != nil {
		t.Fatal(err)
	}
	if err := n.unprepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	n.checkClean(t)
	if _, err := deviceStatusOf(ctx, c, "our entries removed after unprepare", func(d []resourceapi.AllocatedDeviceStatus) bool { return len(d) == 0 }); err != nil {
		t.Error(err)
	}

	// The same GPU, now claimed whole, must be prepared out of MIG mode.
	whole := claimSpec("whole", "gpu.nvidia.com", fmt.Sprintf("device.attributes['gpu.nvidia.com'].index == %d", parent), nil)
	if _, err := suite.Client.ResourceV1().ResourceClaims(ns).Create(ctx, whole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := suite.Client.CoreV1().Pods(ns).Create(ctx, podUsing("p-whole", "whole"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheduled, err := waitScheduled(ctx, ns, 1, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.prepare(ctx, scheduled[0].Claims...); err != nil {
		t.Fatalf("prepare the whole GPU %d after its partition: %v", parent, err)
	}
	n.checkWholeGPUs(t, scheduled[0].Claims, Devices(pool))
	unprepareAll(t, n, ns, scheduled)
}

// checkDeviceStatus: after prepare the claim's status.devices names the MIG device it got, as
// kubectl shows it: UUID, parent, profile, the CDI IDs kubelet was given, the strategy, and
// condition Prepared.
func checkDeviceStatus(ctx context.Context, t *testing.T, c *resourceapi.ResourceClaim, resp *drapbv1.NodePrepareResourcesResponse) {
	t.Helper()
	devs, err := deviceStatusOf(ctx, c, "an entry for the prepared device", func(d []resourceapi.AllocatedDeviceStatus) bool { return len(d) == 1 })
	if err != nil {
		t.Error(err)
		return
	}
	got := devs[0]
	var data draplugin.DeviceStatusData
	if got.Data == nil || json.Unmarshal(got.Data.Raw, &data) != nil {
		t.Fatalf("status.devices[0].data = %v; want the driver's DeviceStatusData", got.Data)
	}
	alloc := c.Status.Allocation.Devices.Results[0]
	want := draplugin.DeviceStatusData{UUID: data.UUID, ParentUUID: data.ParentUUID, MIGProfile: "3g.40gb",
		CDIDeviceIDs: resp.Claims[string(c.UID)].Devices[0].CdiDeviceIds, Sharing: "Exclusive"}
	if diff := cmp.Diff(want, data); diff != "" || !strings.HasPrefix(data.UUID, "MIG-") || !strings.HasPrefix(data.ParentUUID, "GPU-") {
		t.Errorf("status.devices[0].data (-want +got):\n%s(uuid %q, parent %q)", diff, data.UUID, data.ParentUUID)
	}
	if got.Pool != alloc.Pool || got.Device != alloc.Device {
		t.Errorf("status.devices[0] names %s/%s; the allocation %s/%s", got.Pool, got.Device, alloc.Pool, alloc.Device)
	}
	if len(got.Conditions) != 1 || got.Conditions[0].Type != draplugin.ConditionPrepared || got.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("status.devices[0].conditions = %+v; want Prepared=True", got.Conditions)
	}
}

func instanceProfiles(st FakeState, gpu int) []string {
	var out []string
	for _, g := range st.GPUs {
		if g.Index == gpu {
			for _, gi := range g.Instances {
				out = append(out, gi.Profile)
			}
		}
	}
	return out
}

// TestInvalidOpaqueConfigFailsPrepare: the API server and the scheduler accept any opaque
// parameters, so a wrong GpuConfig reaches the driver at prepare. It must fail that claim with
// an error naming what is wrong, leave no CDI spec and change nothing on the node, and keep
// failing the same way (kubelet retries).
func TestInvalidOpaqueConfigFailsPrepare(t *testing.T) {
	ctx := context.Background()
	n := suite.StartNode(t, NodeSpec{Name: "badcfg", Machine: "l4x8"})
	cases := []struct {
		claim string
		cfg   map[string]any
		// want are words the error must contain.
		want []string
	}{
		{"bad-interval", map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
			"sharing": map[string]any{"strategy": "TimeSlicing", "timeSlicingConfig": map[string]any{"interval": "Forever"}}},
			[]string{"interval", "Forever", "Long"}},
		{"unknown-field", map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
			"sharing": map[string]any{"strategy": "TimeSlicing"}, "replicas": 4},
			[]string{"replicas"}},
		{"bad-strategy", map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
			"sharing": map[string]any{"strategy": "Whatever"}},
			[]string{"Whatever", "MPS"}},
	}
	var claims []*resourceapi.ResourceClaim
	var pods []*corev1.Pod
	for _, c := range cases {
		claims = append(claims, claimSpec(c.claim, "gpu.nvidia.com", "", c.cfg))
		pods = append(pods, podUsing("p-"+c.claim, c.claim))
	}
	const ns = "badcfg"
	createPodsWithClaims(t, n, ns, claims, pods...)
	scheduled, err := waitScheduled(ctx, ns, len(cases), n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*resourceapi.ResourceClaim{}
	for _, p := range scheduled {
		byName[p.Claims[0].Name] = p.Claims[0]
	}
	for _, c := range cases {
		t.Run(c.claim, func(t *testing.T) {
			claim := byName[c.claim]
			for attempt := 1; attempt <= 2; attempt++ {
				resp, err := n.Kubelet.Prepare(ctx, kubeletClaims(claim)...)
				if err != nil {
					t.Fatalf("attempt %d: the whole NodePrepareResources call failed; only the claim should: %v", attempt, err)
				}
				msg := resp.Claims[string(claim.UID)].GetError()
				for _, w := range c.want {
					if !strings.Contains(msg, w) {
						t.Errorf("attempt %d: prepare error %q does not mention %q", attempt, msg, w)
					}
				}
			}
			if err := n.unprepare(ctx, claim); err != nil {
				t.Errorf("unprepare of a claim that never prepared: %v", err)
			}
		})
	}
	n.checkClean(t)
}
