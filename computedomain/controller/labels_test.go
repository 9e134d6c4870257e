package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain"
)

// channelClaim is a claim of a domain's channel template (its opaque config names the domain)
// allocated on node, or not allocated when node is "".
func channelClaim(name, ns, domainUID, node string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Config: []resourcev1.DeviceClaimConfiguration{{
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver: computedomain.DriverName,
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"` +
					domainUID + `","allocationMode":"Single"}`)},
			}}}}}}}
	if node != "" {
		c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "channel", Driver: computedomain.DriverName, Pool: node, Device: "channel-0"}}}}
	}
	return c
}

// TestNodeLabelsFollowAllocations: the domain's label is on exactly the nodes whose channel a
// claim of the domain holds: added where the scheduler allocated one (replacing a stale label
// of another domain), removed where none is held any more; nodes of other domains' claims, and
// claims of the domain's UID in another namespace, are left alone.
func TestNodeLabelsFollowAllocations(t *testing.T) {
	e := newEnv(t, nil,
		withStatus(newDomain("training", shapeUID, 2, "training-channel"), cliqueA),
		newNode("a-0"), newNode("a-1", domainLabel, "uid-stale"), newNode("a-2", domainLabel, shapeUID),
		newNode("a-3", domainLabel, "uid-other"), newNode("a-4"), newNode("a-5"),
		channelClaim("w-0", "team-a", shapeUID, "a-0"),
		channelClaim("w-1", "team-a", shapeUID, "a-1"),
		channelClaim("w-pending", "team-a", shapeUID, ""),
		channelClaim("other", "team-a", "uid-other", "a-3"),
		channelClaim("elsewhere", "team-b", shapeUID, "a-4"),
		channelClaim("gone-node", "team-a", shapeUID, "a-9"),
	)
	e.reconcile("team-a", "training")
	var nodes corev1.NodeList
	if err := e.client.List(e.ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range nodes.Items {
		got[n.Name] = n.Labels[computedomain.NodeLabel]
	}
	want := map[string]string{"a-0": shapeUID, "a-1": shapeUID, "a-2": "", "a-3": "uid-other", "a-4": "", "a-5": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node labels (-want +got):\n%s", diff)
	}
}

// TestNodeLabelsLeaveWithTheClaims: once the job's claims are gone, the next reconcile takes
// the label from their nodes (and with it the domain's IMEX daemons).
func TestNodeLabelsLeaveWithTheClaims(t *testing.T) {
	claim := channelClaim("w-0", "team-a", shapeUID, "a-0")
	e := newEnv(t, nil, withStatus(newDomain("training", shapeUID, 1, "training-channel"), cliqueA), newNode("a-0"), claim)
	e.reconcile("team-a", "training")
	n := &corev1.Node{}
	if err := e.client.Get(e.ctx, client.ObjectKey{Name: "a-0"}, n); err != nil || n.Labels[computedomain.NodeLabel] != shapeUID {
		t.Fatalf("node a-0 labels %v (%v), want the domain's", n.Labels, err)
	}
	if err := e.client.Delete(e.ctx, claim); err != nil {
		t.Fatal(err)
	}
	e.reconcile("team-a", "training")
	if err := e.client.Get(e.ctx, client.ObjectKey{Name: "a-0"}, n); err != nil || n.Labels[computedomain.NodeLabel] != "" {
		t.Errorf("node a-0 labels %v (%v) after the claim went, want no domain label", n.Labels, err)
	}
}
