package binaries

import (
	"slices"
	"testing"
)

// TestVersionLDFlags: clients compare gitVersion and gitMajor/gitMinor of the server, so both
// packages that carry version information get all three (facts from Kubernetes' build scripts,
// hack/lib/version.sh).
func TestVersionLDFlags(t *testing.T) {
	got, err := versionLDFlags("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, want := range []string{"-X " + pkg + ".gitVersion=v1.37.2", "-X " + pkg + ".gitMajor=1", "-X " + pkg + ".gitMinor=37"} {
			if !slices.Contains(got, want) {
				t.Errorf("ldflags %v lack %q", got, want)
			}
		}
	}
	if _, err := versionLDFlags("latest"); err == nil {
		t.Error("a version that is not semver was accepted")
	}
}
