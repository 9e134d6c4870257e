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
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

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

// TestCreateFirstSlices: on a node with no slice of the driver, the pool's slices are created
// as the helper's ResourceSlice controller names and fills them (its hex index first, generation
// 1, the Node as controlling owner); with a slice already there (a restart) or no Node object,
// none is created. That the controller keeps them is checked against a real API server
// (test/e2e TestSlicesPassAPIValidation): the fake client knows no field selectors.
func TestCreateFirstSlices(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid"}}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node-1": {Slices: []resourceslice.Slice{
		{Devices: []resourceapi.Device{{Name: "accel-0"}}}, {Devices: []resourceapi.Device{{Name: "accel-1"}}}}}}}
	list := func(t *testing.T, c *fake.Clientset) []resourceapi.ResourceSlice {
		t.Helper()
		l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}

	t.Run("fresh node", func(t *testing.T) {
		c := fake.NewClientset(node)
		generated := 0 // the fake does not generate names as the API server does
		c.PrependReactor("create", "resourceslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
			s := a.(clienttesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
			if s.Name == "" {
				generated++
				s.Name = fmt.Sprintf("%s%05d", s.GenerateName, generated)
			}
			return false, nil, nil
		})
		n, err := pluginkit.CreateFirstSlices(ctx, c, "accel.example.com", "node-1", res)
		if err != nil || n != 2 {
			t.Fatalf("created %d, %v; want 2", n, err)
		}
		type summary struct {
			GenerateName string
			Owners       []metav1.OwnerReference
			Pool         resourceapi.ResourcePool
			Node         string
			Devices      int
		}
		var got []summary
		for _, s := range list(t, c) {
			got = append(got, summary{s.GenerateName, s.OwnerReferences, s.Spec.Pool, *s.Spec.NodeName, len(s.Spec.Devices)})
		}
		owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1", UID: "node-uid", Controller: ptr.To(true)}}
		pool := resourceapi.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: 2}
		want := []summary{
			{"00000-accel.example.com-node-1-", owner, pool, "node-1", 1},
			{"00001-accel.example.com-node-1-", owner, pool, "node-1", 1},
		}
		if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b summary) bool { return a.GenerateName < b.GenerateName })); diff != "" {
			t.Errorf("slices (-want +got):\n%s", diff)
		}
	})
	t.Run("slices already there", func(t *testing.T) {
		old := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "00000-accel.example.com-node-1-abcde"},
			Spec: resourceapi.ResourceSliceSpec{Driver: "accel.example.com", NodeName: ptr.To("node-1")}}
		c := fake.NewClientset(node, old)
		if n, err := pluginkit.CreateFirstSlices(ctx, c, "accel.example.com", "node-1", res); err != nil || n != 0 {
			t.Fatalf("created %d, %v; want none", n, err)
		}
		if got := len(list(t, c)); got != 1 {
			t.Errorf("%d slices, want the 1 that was there", got)
		}
	})
	t.Run("no node object", func(t *testing.T) {
		c := fake.NewClientset()
		if n, err := pluginkit.CreateFirstSlices(ctx, c, "accel.example.com", "node-1", res); err == nil || n != 0 {
			t.Fatalf("created %d, %v; want an error and none", n, err)
		}
		if got := len(list(t, c)); got != 0 {
			t.Errorf("%d slices, want none", got)
		}
	})
}
