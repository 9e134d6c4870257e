package nvmlmig_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// TestModelFromDeviceMock reads go-nvml's dgxa100 mock. Its geometry agrees with the catalog, and
// (research §1.3) every go-nvml mock reports the profile enum as the profile Id, so Compare must
// report exactly the Ids as different.
func TestModelFromDeviceMock(t *testing.T) {
	dev := dgxa100.NewDevice(0)
	live, err := nvmlmig.ModelFromDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	table := mustLookup(t, "A100-SXM4-40GB")
	if live.Name != "A100-SXM4-40GB" && !strings.Contains(live.Name, "A100-SXM4-40GB") {
		t.Errorf("live name %q", live.Name)
	}
	var want []mig.Difference
	for _, p := range table.Profiles {
		if p.ID != p.Enum {
			want = append(want, mig.Difference{Field: "profiles[" + p.Name + "].id", Model: table.Name, Profile: p.Name, Property: "id",
				Table: itoa(p.ID), Live: itoa(p.Enum)})
		}
	}
	if diff := cmp.Diff(want, mig.Compare(table, live)); diff != "" {
		t.Errorf("mig.Compare(table, dgxa100 mock) (-want +got):\n%s", diff)
	}
	if d := mig.Compare(table, table); len(d) != 0 {
		t.Errorf("mig.Compare(table, table) = %v", d)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func mustLookup(t testing.TB, name string) *mig.Model {
	t.Helper()
	m, err := mig.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
