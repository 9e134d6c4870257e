package draplugin_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// publishedDevices lists the devices of every ResourceSlice in the API, sorted.
func publishedDevices(t *testing.T, client kubernetes.Interface) []string {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestDeletedSlicesComeBack: kubelet deletes every ResourceSlice of its node when it starts.
// The plugin publishes them again about a second later, not after the helper's 30-second sync
// delay, during which none of the node's GPUs could be allocated (waitFor gives up after 10 s).
func TestDeletedSlicesComeBack(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	srv := serve(t, e, e.plugin())
	client := srv.Client
	waitFor(t, func() bool { return len(publishedDevices(t, client)) > 0 }, "the first ResourceSlices")
	want := publishedDevices(t, client)

	for round := range 2 { // and again: the watch stays on
		list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			if err := client.ResourceV1().ResourceSlices().Delete(context.Background(), s.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := publishedDevices(t, client); len(got) != 0 {
			t.Fatalf("round %d: slices left after deleting them all: %v", round, got)
		}
		waitFor(t, func() bool { return len(publishedDevices(t, client)) == len(want) }, "the deleted ResourceSlices to come back")
		if diff := cmp.Diff(want, publishedDevices(t, client)); diff != "" {
			t.Errorf("round %d: republished devices (-before +after):\n%s", round, diff)
		}
	}
}
