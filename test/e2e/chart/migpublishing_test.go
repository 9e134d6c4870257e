package chart

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestChartDynamicMIGPublishing: dynamicMIGPublishing's values become serve's
// --mig-partitions-first and --mig-one-me-placement, with dynamicMIG only;
// staticMIGPublishing.byProfile becomes --mig-by-profile without it.
func TestChartDynamicMIGPublishing(t *testing.T) {
	flags := []string{"--mig-partitions-first", "--mig-one-me-placement", "--mig-by-profile"}
	for name, tc := range map[string]struct {
		vals map[string]any
		want []string
	}{
		"defaults":          {nil, nil},
		"dynamic MIG alone": {map[string]any{"dynamicMIG": true}, nil},
		"partitions first":  {map[string]any{"dynamicMIG": true, "dynamicMIGPublishing": map[string]any{"partitionsFirst": true}}, flags[:1]},
		"both":              {map[string]any{"dynamicMIG": true, "dynamicMIGPublishing": map[string]any{"partitionsFirst": true, "oneMediaExtensionPlacement": true}}, flags[:2]},
		"static by profile": {map[string]any{"staticMIGPublishing": map[string]any{"byProfile": true}}, flags[2:]},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, a := range daemonSet(t, render(t, kubeVersion, tc.vals)).Spec.Template.Spec.Containers[0].Args {
				if slices.Contains(flags, a) {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("publishing flags (-want +got):\n%s", diff)
			}
		})
	}
}
