package mpspod_test

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/sharing/mpspod"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

// lifecycle starts a daemon (twice: the second adopts its pod), runs its pod's command until
// Ready, and stops it, as a plugin and kubelet would; it returns the first error.
func lifecycle(t *testing.T, client *fake.Clientset) error {
	_, ctx := ktesting.NewTestContext(t)
	spec := testSpec(t)
	d, err := mpspod.New(mpspod.Config{Client: client, Namespace: ns, NodeName: node, Image: "driver:v1",
		Mounter: sharingtest.NewFakeHost(), ReadyTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, spec); err != nil {
		return err
	}
	if err := d.Start(ctx, spec); err != nil {
		return err
	}
	podCtx, stopPod := context.WithCancel(ctx)
	defer stopPod()
	done := make(chan error, 1)
	go func() { done <- mpspod.Run(podCtx, spec, &mpspod.FakeControl{Spec: spec}, time.Second) }()
	defer func() { stopPod(); <-done }()
	if err := d.Ready(ctx, spec); err != nil {
		return err
	}
	// kubelet stops the pod's command once the pod is deleted.
	client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		stopPod()
		return false, nil, nil
	})
	return d.Stop(ctx, spec)
}

// TestPodVerbs: a daemon's whole life takes create, get and delete on pods of the driver's
// namespace and nothing else (the chart's Role grants exactly these), and each of the three is
// needed: forbidden, the daemon cannot be started, adopted or stopped.
func TestPodVerbs(t *testing.T) {
	client := fake.NewClientset()
	if err := lifecycle(t, client); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range client.Actions() {
		if a.GetResource().Resource != "pods" || a.GetNamespace() != ns || a.GetSubresource() != "" {
			t.Errorf("call outside pods of namespace %s: %s %s/%s in %q", ns, a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), a.GetNamespace())
		}
		if !slices.Contains(verbs, a.GetVerb()) {
			verbs = append(verbs, a.GetVerb())
		}
	}
	slices.Sort(verbs)
	if want := []string{"create", "delete", "get"}; !slices.Equal(verbs, want) {
		t.Errorf("verbs used %v, want %v", verbs, want)
	}
	for _, verb := range []string{"create", "get", "delete"} {
		t.Run("no-"+verb, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor(verb, "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil)
			})
			if err := lifecycle(t, client); err == nil {
				t.Errorf("a daemon's life went through without %s on pods", verb)
			} else {
				t.Logf("fails as it should: %v", err)
			}
		})
	}
}
