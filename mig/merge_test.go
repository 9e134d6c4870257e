package mig_test

import (
	"testing"

	"github.com/gpudra/gpudra/mig"
)

// TestMergeCatalog: a model as read from a GPU (no compute-instance profiles, no SM count, one
// profile's memory changed by the driver) keeps what the GPU said, gets the rest from the
// catalog, and the catalog's differences name the changed memory; a model the catalog does not
// know gets derived compute-instance profiles and a single "model" difference.
func TestMergeCatalog(t *testing.T) {
	cat, err := mig.Lookup("A100-SXM4-40GB")
	if err != nil {
		t.Fatal(err)
	}
	live := cat.Clone()
	live.Multiprocessors = 0
	for i := range live.Profiles {
		live.Profiles[i].ComputeProfiles = nil
	}
	p, _ := live.Profile("1g.5gb")
	p.MemoryMiB = 4608
	diffs := mig.MergeCatalog(live)
	if len(diffs) != 1 || diffs[0].Field != "profiles[1g.5gb].memoryMiB" || diffs[0].Live != "4608" {
		t.Errorf("MergeCatalog differences = %v, want only profiles[1g.5gb].memoryMiB", diffs)
	}
	if p, _ := live.Profile("1g.5gb"); p.MemoryMiB != 4608 || len(p.ComputeProfiles) == 0 {
		t.Errorf("merged 1g.5gb: memory %d MiB, %d compute profiles; want the GPU's 4608 and the catalog's", p.MemoryMiB, len(p.ComputeProfiles))
	}
	if live.Multiprocessors != cat.Multiprocessors {
		t.Errorf("merged SM count %d, want the catalog's %d", live.Multiprocessors, cat.Multiprocessors)
	}

	unknown := cat.Clone()
	unknown.Name = "Imaginary GPU"
	for i := range unknown.Profiles {
		unknown.Profiles[i].ComputeProfiles = nil
	}
	diffs = mig.MergeCatalog(unknown)
	if len(diffs) != 1 || diffs[0].Property != "model" || diffs[0].Live != "Imaginary GPU" {
		t.Errorf("MergeCatalog(unknown model) = %v, want one model difference", diffs)
	}
	for _, p := range unknown.Profiles {
		if len(p.ComputeProfiles) == 0 {
			t.Errorf("unknown model's %s has no compute-instance profiles", p.Name)
		}
	}
	if d := mig.MergeCatalog(nil); len(d) != 1 || d[0].Property != "model" {
		t.Errorf("MergeCatalog(nil) = %v, want one model difference", d)
	}
}
