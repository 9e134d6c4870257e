package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
)

// TestCheckPassthrough: seed 002's VfioGpuClaimParameters, upgraded, pass on a machine
// published with --passthrough; without it they pass with a warning that the class selects
// nothing.
func TestCheckPassthrough(t *testing.T) {
	code, upgraded, errOut := runCLI(t, "check", "--print-upgraded", "../../selectors/testdata/seeds/002-vfio.yaml")
	if code != 0 {
		t.Fatalf("--print-upgraded: exit %d: %s", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "vfio.yaml")
	if err := os.WriteFile(file, []byte(upgraded), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args        []string
		wantNothing bool
	}{
		{[]string{"check", file, "--passthrough"}, false},
		{[]string{"check", file}, true},
	} {
		code, out, errOut := runCLI(t, c.args...)
		if code != 0 {
			t.Errorf("%v: exit %d, want 0\n%s%s", c.args, code, out, errOut)
		}
		if nothing := strings.Contains(out, "[matches-nothing]"); nothing != c.wantNothing {
			t.Errorf("%v: matches-nothing reported %v, want %v\n%s", c.args, nothing, c.wantNothing, out)
		}
	}
}

// TestRenderPassthrough: render --passthrough publishes each GPU of the fake machine a second
// time for passthrough, in its fake PCI host's IOMMU group; without the flag, none.
func TestRenderPassthrough(t *testing.T) {
	vfioGroups := func(args ...string) map[string]int64 {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"render", "--machine", "l4x8", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("render %v: exit %d: %s", args, code, errOut)
		}
		var list struct {
			Items []resourceapi.ResourceSlice `json:"items"`
		}
		if err := yaml.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				if *d.Attributes[gpudra.AttrType].StringValue == gpudra.DeviceTypeVFIO {
					got[d.Name] = *d.Attributes[gpudra.AttrIOMMUGroup].IntValue
				}
			}
		}
		return got
	}
	want := map[string]int64{}
	for minor := range 8 {
		want[gpudra.VFIODeviceName(minor)] = int64(fakeIOMMUGroup(minor))
	}
	if diff := cmp.Diff(want, vfioGroups("--passthrough")); diff != "" {
		t.Errorf("render --passthrough: vfio devices and groups (-want +got):\n%s", diff)
	}
	if got := vfioGroups(); len(got) != 0 {
		t.Errorf("render without --passthrough published vfio devices %v", got)
	}
}
