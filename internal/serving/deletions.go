package serving

import (
	"context"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// RepublishDelay is how long after one of its ResourceSlices is deleted a plugin publishes
// again: long enough for the helper's ResourceSlice controller to see the deletion in its own
// informer (it compares what should exist with that cache), far shorter than the controller's
// sync delay.
const RepublishDelay = time.Second

// WatchDeletions calls republish RepublishDelay after a ResourceSlice of driver on node is
// deleted (once for deletions that come within that delay of each other), until ctx ends or stop
// is closed; it returns once its informer is started.
//
// Why: kubelet deletes every ResourceSlice of its node when it starts, and a user may delete
// one by hand. The helper's ResourceSlice controller (k8s.io/dynamic-resource-allocation v0.37)
// recreates them only after its sync delay, 30 seconds, which the kubelet-plugin helper does not
// let a driver change; until then none of the node's devices can be allocated. A publish hands
// the controller the same pool again, which makes it sync at once. Deletions the plugin's own
// publishes make (a pool that shrank) cost one publish that changes nothing.
func WatchDeletions(ctx context.Context, client kubernetes.Interface, driver, node string, stop <-chan struct{}, republish func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-stop:
		}
	}()
	informer := sliceInformer(client, driver, node)
	logger := klog.FromContext(ctx)
	// kubelet deletes all of a node's slices at once: one publish after the last of them, not
	// one per slice.
	var pending atomic.Bool
	schedule := func() {
		if pending.CompareAndSwap(false, true) {
			time.AfterFunc(RepublishDelay, func() {
				pending.Store(false)
				republish()
			})
		}
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		s, ok := obj.(*resourceapi.ResourceSlice)
		// A fake client ignores field selectors: check what the API server would have.
		if !ok || s.Spec.Driver != driver || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			return
		}
		logger.V(2).Info("ResourceSlice deleted; publishing again", "slice", s.Name, "in", RepublishDelay)
		schedule()
	}})
	if err != nil {
		logger.Error(err, "Watching for deleted ResourceSlices failed; a deleted slice comes back after the helper's sync delay")
		return
	}
	go informer.Run(done)
}

// sliceInformer watches the ResourceSlices of driver on node. It is built directly, not
// through client-go's informers.SharedInformerFactory: the factory's ForResource method names
// the informer and lister of every API group, so importing it links them all into the driver
// binary (about 1.2 MB of code, and their type data), where only this one is used.
func sliceInformer(client kubernetes.Interface, driver, node string) cache.SharedIndexInformer {
	selector := fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", node),
		fields.OneTermEqualSelector("spec.driver", driver)).String()
	slices := client.ResourceV1().ResourceSlices()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return slices.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return slices.Watch(ctx, o)
		},
	}
	// As the generated informer does: the client says whether it can stream the initial
	// list (a fake clientset cannot).
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &resourceapi.ResourceSlice{}, 0, cache.Indexers{})
}
