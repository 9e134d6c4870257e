package lint_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/manifest"
)

// FuzzParsePolicy: policy files never panic ParsePolicy, and an accepted policy evaluates a
// seed manifest without panic.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{
		"blockedMIGProfiles: ['7g.*']\n", "allowedMIGProfiles: ['1g.*', '2g.10gb']\nmaxGPUsPerClaim: 2\n",
		"requiredSharing: {default: TimeSlicing}\n", "blockedMigProfiles: [a]\n", "maxGPUsPerClaim: -1\n",
		"blockedMIGProfiles: ['[']\n", "", "{", "\x00",
	} {
		f.Add([]byte(s))
	}
	data, err := os.ReadFile("../../examples/deploy/workloads/05-mig-1g.yaml")
	if err != nil {
		f.Fatal(err)
	}
	objs, _ := manifest.Decode(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := lint.ParsePolicy(data)
		if err != nil {
			return
		}
		_ = p.Evaluate(context.Background(), objs, lint.Environment{})
	})
}
