package kubelettest_test

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/draplugin/kubelettest"
)

// TestAPIClientFiltersSlices: created and updated slices are stored as the filter returns them,
// generateName gets a name, and a dry run stores nothing.
func TestAPIClientFiltersSlices(t *testing.T) {
	client := kubelettest.NewAPIClient(func(s *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
		out := s.DeepCopy()
		out.Spec.Devices = nil
		return out
	})
	slices := client.ResourceV1().ResourceSlices()
	in := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-1-fpga-"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "fpga.example.com", Devices: []resourceapi.Device{{Name: "fpga-0"}}}}
	if _, err := slices.Create(t.Context(), in, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if list, _ := slices.List(t.Context(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatalf("a dry run stored %d slices", len(list.Items))
	}
	created, err := slices.Create(t.Context(), in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(created.Name, "node-1-fpga-0") || len(created.Spec.Devices) != 0 {
		t.Errorf("created %q with %d devices, want a generated name filtered to none", created.Name, len(created.Spec.Devices))
	}
	created.Spec.Devices = in.Spec.Devices
	updated, err := slices.Update(t.Context(), created, metav1.UpdateOptions{})
	if err != nil || len(updated.Spec.Devices) != 0 {
		t.Errorf("update: %v, %d devices stored, want the filter's none", err, len(updated.Spec.Devices))
	}
	if got, _ := kubelettest.NewFakeClient().Discovery().ServerResourcesForGroupVersion(resourceapi.SchemeGroupVersion.String()); got == nil || len(got.APIResources) != 2 {
		t.Errorf("discovery of %s: %v", resourceapi.SchemeGroupVersion, got)
	}
}
