package mig_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
)

func recordings(t *testing.T) []gputest.Recording {
	t.Helper()
	recs, err := gputest.Recordings()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// recordedRow is what an -lgip row says about a profile, in nvidia-smi's units.
type recordedRow struct {
	ID, Count, SM, DEC, ENC, CE, JPEG, OFA int
	GiB                                    string
}

func rowOf(r mig.SMIProfile) recordedRow {
	return recordedRow{r.ID, r.Total, r.Multiprocessors, r.Decoders, r.Encoders, r.CopyEngines, r.JpegEngines, r.OfaEngines, r.MemoryGiB}
}

func catalogRow(p *mig.GIProfile) recordedRow {
	return recordedRow{p.ID, p.InstanceCount, p.Multiprocessors, p.Decoders, p.Encoders, p.CopyEngines, p.JpegEngines, p.OfaEngines,
		mig.FormatGiB(p.MemoryMiB)}
}

// TestCatalogMatchesRecordings compares the catalog with every recorded nvidia-smi printout, one
// subtest per model: the product name resolves to the model; every -lgip row's Id, instance
// count, SMs, engines and memory (as nvidia-smi prints it; skipped for recordings whose memory a
// newer driver superseded) equal the catalog's; every -lgipp line equals the catalog placements
// of that profile Id; every -lgi layout is one the catalog validates, with the recorded profile
// Ids and placements.
func TestCatalogMatchesRecordings(t *testing.T) {
	byModel := map[string][]gputest.Recording{}
	for _, r := range recordings(t) {
		byModel[r.Model] = append(byModel[r.Model], r)
	}
	if len(byModel) < 10 {
		t.Fatalf("only %d models have recordings", len(byModel))
	}
	for model, recs := range byModel {
		t.Run(model, func(t *testing.T) {
			for _, r := range recs {
				m, err := mig.Lookup(r.ProductName)
				if err != nil || m.Name != model {
					t.Fatalf("%s: product %q resolves to %v, %v; want %s", r.File, r.ProductName, m, err, model)
				}
				checkProfiles(t, m, r)
				checkPlacements(t, m, r)
				checkInstances(t, m, r)
			}
		})
	}
}

func checkProfiles(t *testing.T, m *mig.Model, r gputest.Recording) {
	t.Helper()
	if r.Profiles == "" {
		return
	}
	rows, err := mig.ParseSMIProfiles(r.Profiles)
	if err != nil {
		t.Fatalf("%s: %v", r.File, err)
	}
	for _, row := range rows {
		p, ok := m.Profile(row.Name)
		if !ok || p.Name != row.Name {
			t.Errorf("%s: catalog lacks profile %s (Id %d)", r.File, row.Name, row.ID)
			continue
		}
		want, got := rowOf(row), catalogRow(p)
		if r.MemorySupersededBy != "" {
			want.GiB, got.GiB = "", ""
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: profile %s (-recorded +catalog):\n%s", r.File, row.Name, diff)
		}
	}
}

func checkPlacements(t *testing.T, m *mig.Model, r gputest.Recording) {
	t.Helper()
	if r.Placements == "" {
		return
	}
	lines, err := mig.ParseSMIPlacements(r.Placements)
	if err != nil {
		t.Fatalf("%s: %v", r.File, err)
	}
	for _, l := range lines {
		p, ok := m.ProfileByID(l.ProfileID)
		if !ok {
			t.Errorf("%s: no catalog profile has Id %d", r.File, l.ProfileID)
			continue
		}
		if diff := cmp.Diff(l.Placements, p.Placements); diff != "" {
			t.Errorf("%s: placements of %s (Id %d) (-recorded +catalog):\n%s", r.File, p.Name, l.ProfileID, diff)
		}
	}
}

func checkInstances(t *testing.T, m *mig.Model, r gputest.Recording) {
	t.Helper()
	for i, text := range r.Instances {
		insts, err := mig.ParseSMIInstances(text)
		if err != nil {
			t.Fatalf("%s -lgi #%d: %v", r.File, i, err)
		}
		var layout []mig.Instance
		for _, in := range insts {
			p, ok := m.ProfileByID(in.ProfileID)
			if !ok || p.Name != in.Name {
				t.Errorf("%s -lgi #%d: profile Id %d is %v in the catalog, recorded as %s", r.File, i, in.ProfileID, p, in.Name)
				continue
			}
			pl := in.Placement
			layout = append(layout, mig.Instance{Profile: in.Name, Placement: &pl})
		}
		if _, err := mig.Validate(m, layout); err != nil {
			t.Errorf("%s -lgi #%d: the catalog rejects the recorded layout %s: %v", r.File, i, mig.FormatLayout(layout), err)
		}
	}
}

// TestRecordedMarkersAreHonest: a catalog field marked SourceRecorded is covered by a kept
// recording of the model, and every field a current recording covers is marked SourceRecorded.
func TestRecordedMarkersAreHonest(t *testing.T) {
	covered := map[string]bool{} // "model/profile/field"
	for _, r := range recordings(t) {
		if r.Profiles != "" {
			rows, err := mig.ParseSMIProfiles(r.Profiles)
			if err != nil {
				t.Fatal(err)
			}
			for _, row := range rows {
				fields := []string{"id", "multiprocessors", "copyEngines", "mediaEngines", "instanceCount"}
				if r.MemorySupersededBy == "" {
					fields = append(fields, "memory")
				}
				for _, f := range fields {
					covered[r.Model+"/"+row.Name+"/"+f] = true
				}
			}
		}
		if r.Placements != "" {
			lines, err := mig.ParseSMIPlacements(r.Placements)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := mig.Lookup(r.ProductName)
			for _, l := range lines {
				if p, ok := m.ProfileByID(l.ProfileID); ok {
					covered[r.Model+"/"+p.Name+"/placements"] = true
				}
			}
		}
	}
	for _, m := range mig.Models() {
		for _, p := range m.Profiles {
			s := p.Sources
			marks := map[string]mig.Source{"id": s.ID, "memory": s.Memory, "multiprocessors": s.Multiprocessors,
				"copyEngines": s.CopyEngines, "mediaEngines": s.MediaEngines, "instanceCount": s.InstanceCount, "placements": s.Placements}
			for _, f := range slices.Sorted(maps.Keys(marks)) {
				key := fmt.Sprintf("%s/%s/%s", m.Name, p.Name, f)
				switch {
				case marks[f] == "":
					t.Errorf("%s: no source marker", key)
				case marks[f] == mig.SourceRecorded && !covered[key]:
					t.Errorf("%s: marked recorded, but no kept recording covers it", key)
				case marks[f] != mig.SourceRecorded && covered[key]:
					t.Errorf("%s: a recording covers it, but it is marked %s", key, marks[f])
				}
			}
		}
	}
}
