package serving

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func slice(name, driver, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node}}}
}

// TestWatchDeletions: deleting the node's slices of the driver (kubelet deletes them all at
// start) publishes once, about RepublishDelay later; other nodes' and other drivers' slices
// are not the plugin's business.
func TestWatchDeletions(t *testing.T) {
	const driver, node = "gpu.example.com", "node-1"
	objs := []*resourceapi.ResourceSlice{slice("a", driver, node), slice("b", driver, node), slice("c", driver, node),
		slice("other-node", driver, "node-2"), slice("other-driver", "x.example.com", node)}
	client := fake.NewClientset()
	for _, o := range objs {
		if _, err := client.ResourceV1().ResourceSlices().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int32
	stop := make(chan struct{})
	defer close(stop)
	WatchDeletions(t.Context(), client, driver, node, stop, func() { calls.Add(1) })
	time.Sleep(200 * time.Millisecond) // the informer's first list

	del := func(names ...string) {
		for _, n := range names {
			if err := client.ResourceV1().ResourceSlices().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	del("other-node", "other-driver")
	time.Sleep(RepublishDelay + 500*time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("deleting other nodes' or drivers' slices published %d times, want 0", n)
	}
	del("a", "b", "c")
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(RepublishDelay + 500*time.Millisecond) // room for a second publish that must not come
	if n := calls.Load(); n != 1 {
		t.Errorf("deleting the node's three slices published %d times, want once", n)
	}
}

// TestWatchDeletionsAsksForItsSlicesOnly: the informer's list and watch carry a field
// selector for the node's slices of the driver, so that the API server sends only those
// (a fake clientset ignores it; the test reads what was asked).
func TestWatchDeletionsAsksForItsSlicesOnly(t *testing.T) {
	const driver, node = "gpu.example.com", "node-1"
	client := fake.NewClientset()
	var mu sync.Mutex
	asked := map[string]string{}
	client.PrependReactor("*", "resourceslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if r, ok := a.(interface {
			GetListRestrictions() clienttesting.ListRestrictions
		}); ok {
			mu.Lock()
			asked[a.GetVerb()] = r.GetListRestrictions().Fields.String()
			mu.Unlock()
		}
		return false, nil, nil
	})
	client.PrependWatchReactor("resourceslices", func(a clienttesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		asked["watch"] = a.(clienttesting.WatchAction).GetWatchRestrictions().Fields.String()
		mu.Unlock()
		return false, nil, nil
	})
	stop := make(chan struct{})
	defer close(stop)
	WatchDeletions(t.Context(), client, driver, node, stop, func() {})
	want := map[string]string{"list": "spec.driver=" + driver + ",spec.nodeName=" + node, "watch": "spec.driver=" + driver + ",spec.nodeName=" + node}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		diff := cmp.Diff(want, asked)
		mu.Unlock()
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("field selectors of the informer's calls (-want +got):\n%s", diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
