package scale

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUnpatchedRatio: a kind run with a patched kube-scheduler is compared with the same kind's
// unpatched median, and an unpatched kind with nothing.
func TestUnpatchedRatio(t *testing.T) {
	cpu := map[string][]float64{
		"dynamic-mig":            {100, 120, 110},
		"dynamic-mig+pool-cache": {50, 60, 55},
		"static-mig+pool-cache":  {30},
	}
	got := map[string]string{}
	for _, k := range []string{"dynamic-mig", "dynamic-mig+pool-cache", "static-mig+pool-cache"} {
		got[k] = unpatchedRatio(k, cpu)
	}
	want := map[string]string{
		"dynamic-mig":            "–",
		"dynamic-mig+pool-cache": "0.50×", // median 55 over median 110
		"static-mig+pool-cache":  "–",     // its unpatched kind did not run
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unpatchedRatio (-want +got):\n%s", diff)
	}
}
