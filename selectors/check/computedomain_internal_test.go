package check

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/selectors/manifest"
)

// TestComputeDomainClassesAreTheChart: the classes check knows are those of
// examples/deploy/computedomain/deviceclasses.yaml (the chart's), so that check judges
// claims against what the cluster has.
func TestComputeDomainClassesAreTheChart(t *testing.T) {
	data, err := os.ReadFile("../../examples/deploy/computedomain/deviceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	var want []*resourceapi.DeviceClass
	for _, o := range objs {
		want = append(want, o.Object.(*resourceapi.DeviceClass))
	}
	if diff := cmp.Diff(want, computeDomainClasses()); diff != "" {
		t.Errorf("classes (-deviceclasses.yaml +check's):\n%s", diff)
	}
}
