package serving_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/serving"
)

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
		n, err := serving.CreateFirstSlices(ctx, c, "accel.example.com", "node-1", res)
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
		if n, err := serving.CreateFirstSlices(ctx, c, "accel.example.com", "node-1", res); err != nil || n != 0 {
			t.Fatalf("created %d, %v; want none", n, err)
		}
		if got := len(list(t, c)); got != 1 {
			t.Errorf("%d slices, want the 1 that was there", got)
		}
	})
	t.Run("no node object", func(t *testing.T) {
		c := fake.NewClientset()
		if n, err := serving.CreateFirstSlices(ctx, c, "accel.example.com", "node-1", res); err == nil || n != 0 {
			t.Fatalf("created %d, %v; want an error and none", n, err)
		}
		if got := len(list(t, c)); got != 0 {
			t.Errorf("%d slices, want none", got)
		}
	})
}
