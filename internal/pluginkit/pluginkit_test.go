package pluginkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/pluginkit"
)

// TestLocksExcludeAcrossInstances: two Locks on one state directory, as two plugin processes
// of a rolling update have, never hold the same key at once; different keys do not wait.
func TestLocksExcludeAcrossInstances(t *testing.T) {
	dir := t.TempDir()
	a, err := pluginkit.NewLocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := pluginkit.NewLocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	unlockA, err := a.Lock([]string{"accel-1", "accel-0"})
	if err != nil {
		t.Fatal(err)
	}
	unlockOther, err := b.Lock([]string{"accel-2"})
	if err != nil {
		t.Fatal(err)
	}
	unlockOther()
	var held atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		unlock, err := b.Lock([]string{"accel-0"})
		if err != nil {
			t.Error(err)
			return
		}
		held.Store(true)
		unlock()
	}()
	time.Sleep(50 * time.Millisecond)
	if held.Load() {
		t.Fatal("the second instance took accel-0 while the first held it")
	}
	unlockA()
	<-done
	if !held.Load() {
		t.Fatal("the second instance never got accel-0")
	}
}

// TestLocksRejectKeysThatAreNoFileNames: a key that would name another file is an error.
func TestLocksRejectKeysThatAreNoFileNames(t *testing.T) {
	l, err := pluginkit.NewLocks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, key := range []string{"", ".", "..", "a/b", `a\b`} {
		if _, err := l.Lock([]string{"ok", key}); err == nil || !strings.Contains(err.Error(), "cannot name a lock file") {
			t.Errorf("key %q: error %v", key, err)
		}
	}
	// The valid key locked before the bad one was released.
	unlock, err := l.Lock([]string{"ok"})
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// TestFatalKeepsTheFirstFatalError: recoverable errors are only logged; the first fatal one
// closes Done and is Err, later ones do not replace it.
func TestFatalKeepsTheFirstFatalError(t *testing.T) {
	f := pluginkit.NewFatal()
	ctx := context.Background()
	f.HandleError(ctx, fmt.Errorf("publish: %w", kubeletplugin.ErrRecoverable), "slices")
	select {
	case <-f.Done():
		t.Fatal("a recoverable error closed Done")
	default:
	}
	first := errors.New("socket gone")
	f.HandleError(ctx, first, "grpc")
	f.HandleError(ctx, errors.New("later"), "grpc")
	<-f.Done()
	if !errors.Is(f.Err(), first) || f.Err().Error() != "grpc: socket gone" {
		t.Fatalf("Err() = %v, want the first fatal error", f.Err())
	}
}

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
			err := pluginkit.SameAllocation(st, c.results)
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
	got, err := pluginkit.CompleteRecovered(rec, claim, []resourceapi.DeviceRequestAllocationResult{result("acc", "node-1", "accel-1")})
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
	_, err = pluginkit.CompleteRecovered(rec, claim, []resourceapi.DeviceRequestAllocationResult{result("acc", "node-1", "accel-2")})
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
	got := pluginkit.Result(st, pluginkit.ShareIDs(claim, "accel.example.com"))
	want := []kubeletplugin.Device{
		{Requests: []string{"a"}, PoolName: "node-1", DeviceName: "accel-0", CDIDeviceIDs: []string{"id-0"}, ShareID: &share},
		{Requests: []string{"b"}, PoolName: "node-1", DeviceName: "accel-1", CDIDeviceIDs: []string{"id-1"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}
