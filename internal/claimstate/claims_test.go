package claimstate_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/claimstate"
)

func result(request, pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "accel.example.com", Pool: pool, Device: device}
}

// TestSameAllocation: a recorded claim matches its allocation whatever the order of the
// results; another request, pool or device is a mismatch.
func TestSameAllocation(t *testing.T) {
	st := checkpoint.ClaimState{Devices: []checkpoint.PreparedDevice{
		{Request: "a", Pool: "node-1", Device: "accel-0"}, {Request: "b", Pool: "node-1", Device: "accel-1"},
	}}
	cases := []struct {
		name    string
		results []resourceapi.DeviceRequestAllocationResult
		same    bool
	}{
		{"same", []resourceapi.DeviceRequestAllocationResult{result("a", "node-1", "accel-0"), result("b", "node-1", "accel-1")}, true},
		{"reordered", []resourceapi.DeviceRequestAllocationResult{result("b", "node-1", "accel-1"), result("a", "node-1", "accel-0")}, true},
		{"other device", []resourceapi.DeviceRequestAllocationResult{result("a", "node-1", "accel-0"), result("b", "node-1", "accel-2")}, false},
		{"other pool", []resourceapi.DeviceRequestAllocationResult{result("a", "node-1", "accel-0"), result("b", "node-2", "accel-1")}, false},
		{"swapped requests", []resourceapi.DeviceRequestAllocationResult{result("b", "node-1", "accel-0"), result("a", "node-1", "accel-1")}, false},
		{"one fewer", []resourceapi.DeviceRequestAllocationResult{result("a", "node-1", "accel-0")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := claimstate.SameAllocation(st, c.results)
			if (err == nil) != c.same {
				t.Fatalf("SameAllocation: %v, want same=%t", err, c.same)
			}
		})
	}
}

// TestCompleteRecovered: a claim rebuilt from its spec gets its request names, namespace and
// name from the claim kubelet prepares again; a device it no longer has is an error naming it.
func TestCompleteRecovered(t *testing.T) {
	rec := checkpoint.ClaimState{UID: "u", Phase: checkpoint.PrepareCompleted, Recovered: true, Devices: []checkpoint.PreparedDevice{
		{Pool: "node-1", Device: "accel-1", CDIDeviceIDs: []string{"example.com/accel=u-accel-1"}},
	}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u"}}
	got, err := claimstate.CompleteRecovered(rec, claim, []resourceapi.DeviceRequestAllocationResult{result("acc", "node-1", "accel-1")})
	if err != nil {
		t.Fatal(err)
	}
	want := rec.Clone()
	want.Namespace, want.Name, want.Recovered, want.Devices[0].Request = "ns", "c", false, "acc"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("completed entry (-want +got):\n%s", diff)
	}
	if rec.Devices[0].Request != "" {
		t.Error("the recovered entry was changed in place")
	}
	_, err = claimstate.CompleteRecovered(rec, claim, []resourceapi.DeviceRequestAllocationResult{result("acc", "node-1", "accel-2")})
	if err == nil || !strings.Contains(err.Error(), "device accel-1: the claim was recovered") {
		t.Fatalf("re-allocated recovered claim: error %v", err)
	}
}

// TestResultCarriesShareIDs: the answer rebuilt from an entry names each device's request,
// pool, CDI IDs and, for a share of a device, its share ID; other drivers' share IDs are not
// taken.
func TestResultCarriesShareIDs(t *testing.T) {
	share := types.UID("share-1")
	other := types.UID("share-other")
	claim := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "a", Driver: "accel.example.com", Pool: "node-1", Device: "accel-0", ShareID: &share},
			{Request: "b", Driver: "other.example.com", Pool: "node-1", Device: "accel-1", ShareID: &other},
		}}}}}
	st := checkpoint.ClaimState{Devices: []checkpoint.PreparedDevice{
		{Request: "a", Pool: "node-1", Device: "accel-0", CDIDeviceIDs: []string{"id-0"}},
		{Request: "b", Pool: "node-1", Device: "accel-1", CDIDeviceIDs: []string{"id-1"}},
	}}
	got := claimstate.Result(st, claimstate.ShareIDs(claim, "accel.example.com"))
	want := []kubeletplugin.Device{
		{Requests: []string{"a"}, PoolName: "node-1", DeviceName: "accel-0", CDIDeviceIDs: []string{"id-0"}, ShareID: &share},
		{Requests: []string{"b"}, PoolName: "node-1", DeviceName: "accel-1", CDIDeviceIDs: []string{"id-1"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}
