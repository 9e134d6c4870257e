package main

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestDemoClient: the demo's API server serves what it holds through core/v1 and
// resource.k8s.io/v1, has the older resource.k8s.io versions the kubelet-plugin helper's client
// holds (each version is stored apart, as in client-go's fake clientset), and answers other
// groups with an error that says what it serves.
func TestDemoClient(t *testing.T) {
	ctx := t.Context()
	c, err := newDemoClient(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.ResourceV1().ResourceClaims("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"}}
	if _, err := c.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added {
			t.Errorf("watch: got a %s event, want %s", ev.Type, watch.Added)
		}
	case <-time.After(10 * time.Second):
		t.Error("watch: no event for the created claim within 10 s")
	}
	got := map[string]string{}
	get := func(what string, name string, err error) {
		if err != nil {
			got[what] = err.Error()
			return
		}
		got[what] = name
	}
	n, err := c.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	get("core/v1 node", n.GetName(), err)
	v1, err := c.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
	get("v1 claim", v1.GetName(), err)
	v1beta1, err := c.ResourceV1beta1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
	get("v1beta1 claim", v1beta1.GetName(), err)
	v1beta2, err := c.ResourceV1beta2().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
	get("v1beta2 claim", v1beta2.GetName(), err)
	notFound := `resourceclaims.resource.k8s.io "c" not found`
	want := map[string]string{"core/v1 node": "node-1", "v1 claim": "c", "v1beta1 claim": notFound, "v1beta2 claim": notFound}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what the demo's API server serves (-want +got):\n%s", diff)
	}
	if _, err := c.AppsV1().Deployments("default").Get(ctx, "d", metav1.GetOptions{}); !errors.Is(err, errDemoAPI) {
		t.Errorf("apps/v1 Get: got error %v, want one wrapping %q", err, errDemoAPI)
	}
}
