package gpudra_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/mig"
)

// swappedIDs is a catalog whose A100-SXM4-80GB entry has the profile Ids of a and b swapped, as
// a catalog written for another driver release might.
func swappedIDs(a, b string) func(string) (*mig.Model, error) {
	return func(product string) (*mig.Model, error) {
		m, err := mig.Lookup(product)
		if err != nil {
			return nil, err
		}
		pa, _ := m.Profile(a)
		pb, _ := m.Profile(b)
		if pa == nil || pb == nil {
			return nil, errors.New("test catalog: no such profile")
		}
		pa.ID, pb.ID = pb.ID, pa.ID
		return m, nil
	}
}

func unknownCatalog(product string) (*mig.Model, error) {
	return nil, errors.New("test catalog: unknown " + product)
}

// TestStaticAndDynamicNamesAgree (issue 28, defects 2-4): an existing MIG device is named from
// the GPU's own geometry, with the one naming function (mig.ProfileName) the dynamic partitions
// use, so every static MIG device has a dynamic partition of the same name; profiles that
// formula names alike are told apart, never merged. The cases are a catalog that disagrees with
// the device about profile Ids, a product the catalog does not know (where rounding GPU memory
// differently gave 3g.70gb against 3g.71gb on an H200), and two profiles of one name.
func TestStaticAndDynamicNamesAgree(t *testing.T) {
	for _, tc := range []struct {
		name    string
		machine string
		layout  []string
		opts    []gputest.Option
		catalog func(string) (*mig.Model, error)
		// wantProfiles are the profile names the instances must have, in placement
		// order.
		wantProfiles []string
	}{
		{"catalog knows the GPU", "dgx-a100-80gb", []string{"1g.10gb@0", "1g.20gb@4", "2g.20gb@2"}, nil, mig.Lookup,
			[]string{"1g.10gb", "2g.20gb", "1g.20gb"}},
		{"catalog swaps profile Ids", "dgx-a100-80gb", []string{"1g.10gb@0"}, nil, swappedIDs("1g.10gb", "7g.80gb"),
			[]string{"1g.10gb"}},
		{"catalog does not know the GPU", "dgx-h200", []string{"4g.71gb@0", "3g.71gb@4"}, nil, unknownCatalog, nil},
		{"two profiles named alike", "dgx-a100-80gb", []string{"1g.10gb@0", "1g.20gb@4"},
			[]gputest.Option{gputest.WithMIGProfileEdit("1g.20gb", func(p *mig.GIProfile) { p.MemoryMiB = 10240 })}, mig.Lookup, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := gputest.New(tc.machine, append([]gputest.Option{gputest.WithMIG(0, tc.layout...)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := nvmlgpu.Enumerate(context.Background(), m, nvmlgpu.WithCatalog(tc.catalog))
			if err != nil {
				t.Fatal(err)
			}
			inv.GPUs = inv.GPUs[:1]
			devs := inv.GPUs[0].MIGDevices
			if len(devs) != len(tc.layout) {
				t.Fatalf("%d MIG devices, want %d", len(devs), len(tc.layout))
			}
			profiles := map[string]int{} // profile name → GPU-instance profile Id
			for i, d := range devs {
				if _, err := mig.ParseProfile(d.Profile); err != nil {
					t.Errorf("MIG device %d: profile %q: %v", i, d.Profile, err)
				}
				if id, ok := profiles[d.Profile]; ok && id != d.GIProfileID {
					t.Errorf("profile Ids %d and %d are both named %s", id, d.GIProfileID, d.Profile)
				}
				profiles[d.Profile] = d.GIProfileID
				if i < len(tc.wantProfiles) && tc.wantProfiles[i] != "" && d.Profile != tc.wantProfiles[i] {
					t.Errorf("MIG device at %d is named %s, want %s", d.Placement.Start, d.Profile, tc.wantProfiles[i])
				}
			}
			static := partitionNames(t, inv)
			dynamic := partitionNames(t, inv, gpudra.WithDynamicMIG(tc.catalog))
			if len(static) != len(tc.layout) {
				t.Fatalf("static MIG devices %v, want %d", static, len(tc.layout))
			}
			for _, n := range static {
				if !slices.Contains(dynamic, n) {
					t.Errorf("static MIG device %s has no dynamic partition of the same name (dynamic: %v)", n, dynamic)
				}
			}
		})
	}
}
