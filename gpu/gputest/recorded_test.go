package gputest

import (
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/mig"
)

func mustRecordings(t testing.TB) []Recording {
	t.Helper()
	recs, err := Recordings()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestRecordingsWellFormed(t *testing.T) {
	recs := mustRecordings(t)
	if len(recs) < 15 {
		t.Fatalf("%d recordings, want at least 15", len(recs))
	}
	files := map[string]string{}
	for _, r := range recs {
		files[r.File] = r.Model
	}
	current := map[string]string{}
	for _, r := range recs {
		if !strings.Contains(r.Source, "/") && !strings.Contains(r.Source, "document") {
			t.Errorf("%s: source %q names no URL, repository or document", r.File, r.Source)
		}
		if r.MemorySupersededBy != "" && files[r.MemorySupersededBy] != r.Model {
			t.Errorf("%s: memory superseded by %q, which is not a recording of %s", r.File, r.MemorySupersededBy, r.Model)
		}
		if r.Profiles != "" && r.MemorySupersededBy == "" {
			if prev, dup := current[r.Model]; dup {
				t.Errorf("%s and %s are both current -lgip recordings of %s", prev, r.File, r.Model)
			}
			current[r.Model] = r.File
		}
	}
	if _, err := parseRecording("x.txt", "# model: A30\n# product: A30\n# source: a/b\n$ nvidia-smi mig -lgipp\nGPU  0 Profile ID  0 Placement : {0}:4\n"); err != nil {
		t.Errorf("a minimal recording: %v", err)
	}
	for _, bad := range []string{
		"# model: A30\n# source: a/b\n$ nvidia-smi mig -lgip\n",                   // no product
		"# model: A30\n# product: A30\n# source: a/b\n",                           // no section
		"# model: A30\n# product: A30\n# source: a/b\n# colour: red\n$ x -lgip\n", // unknown header
		"# model: A30\n# product: A30\n# source: a/b\n$ nvidia-smi -L\n",          // unknown section
		"# model: A30\n# product: A30\n# source: a/b\n# memory: old\n$ x -lgip\n", // bad memory header
		"text\n$ nvidia-smi mig -lgip\n",                                          // text before a section
	} {
		if _, err := parseRecording("x.txt", bad); err == nil {
			t.Errorf("parseRecording(%q) succeeded", bad)
		}
	}
}

// recordedMachines are the fake machines whose GPU model has a current -lgip recording.
var recordedMachines = map[string]string{
	"dgx-a100-40gb": "A100-SXM4-40GB", "dgx-h100": "H100 80GB HBM3", "dgx-h200": "H200", "dgx-b200": "B200",
	"a30x4": "A30", "gb200-nvl4": "GB200", "rtx-pro-6000x4": "RTX PRO 6000 Blackwell",
}

// TestFakesServeRecordings reads every machine's MIG profiles through NVML, the way a driver
// does, and compares them with the recorded nvidia-smi rows and placements of its model.
func TestFakesServeRecordings(t *testing.T) {
	recs := mustRecordings(t)
	for machine, model := range recordedMachines {
		t.Run(machine, func(t *testing.T) {
			d := dev(t, mustNew(t, machine), 0)
			byID := map[uint32]nvml.GpuInstanceProfileInfo{}
			for enum := range nvml.GPU_INSTANCE_PROFILE_COUNT {
				if info, ret := d.GetGpuInstanceProfileInfo(enum); ret == nvml.SUCCESS {
					byID[info.Id] = info
				}
			}
			checked := 0
			for _, r := range recs {
				if r.Model != model {
					continue
				}
				checked += checkFakeProfiles(t, d, byID, r) + checkFakePlacements(t, d, byID, r)
			}
			if checked == 0 {
				t.Fatalf("no recording of %s was checked", model)
			}
		})
	}
}

func checkFakeProfiles(t *testing.T, d nvml.Device, byID map[uint32]nvml.GpuInstanceProfileInfo, r Recording) int {
	t.Helper()
	if r.Profiles == "" {
		return 0
	}
	rows, err := mig.ParseSMIProfiles(r.Profiles)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		info, ok := byID[uint32(row.ID)]
		if !ok {
			t.Errorf("%s: the fake has no profile Id %d (%s)", r.File, row.ID, row.Name)
			continue
		}
		want := []any{row.Total, row.Multiprocessors, row.Decoders, row.Encoders, row.CopyEngines, row.JpegEngines, row.OfaEngines}
		got := []any{int(info.InstanceCount), int(info.MultiprocessorCount), int(info.DecoderCount), int(info.EncoderCount),
			int(info.CopyEngineCount), int(info.JpegCount), int(info.OfaCount)}
		if r.MemorySupersededBy == "" {
			want, got = append(want, row.MemoryGiB), append(got, mig.FormatGiB(info.MemorySizeMB))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: profile %s (-recorded +fake):\n%s", r.File, row.Name, diff)
		}
	}
	return len(rows)
}

func checkFakePlacements(t *testing.T, d nvml.Device, byID map[uint32]nvml.GpuInstanceProfileInfo, r Recording) int {
	t.Helper()
	if r.Placements == "" {
		return 0
	}
	lines, err := mig.ParseSMIPlacements(r.Placements)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		info := byID[uint32(l.ProfileID)]
		pls, ret := d.GetGpuInstancePossiblePlacements(&info)
		var got []mig.Placement
		for _, p := range pls {
			got = append(got, mig.Placement{Start: int(p.Start), Size: int(p.Size)})
		}
		if diff := cmp.Diff(l.Placements, got); ret != nvml.SUCCESS || diff != "" {
			t.Errorf("%s: placements of Id %d: %v (-recorded +fake):\n%s", r.File, l.ProfileID, ret, diff)
		}
	}
	return len(lines)
}

// TestRecordedModelOverridesCatalog: the fakes take recorded values from the recording, so a wrong
// catalog entry is not mirrored into the fake (and the catalog tests catch it).
func TestRecordedModelOverridesCatalog(t *testing.T) {
	cat, err := mig.Lookup("RTX PRO 6000 Blackwell")
	if err != nil {
		t.Fatal(err)
	}
	wrong := cat.Clone()
	for i := range wrong.Profiles {
		p := &wrong.Profiles[i]
		p.Multiprocessors++
		p.ID += 100
		p.MemoryMiB -= 128
		p.Placements = []mig.Placement{{Start: 0, Size: 1}}
	}
	got, err := recordedModel(wrong, mustRecordings(t))
	if err != nil {
		t.Fatal(err)
	}
	// The expectations are the rtx-pro-6000.txt rows, typed from the recording.
	want := map[string][4]int{"1g.24gb": {14, 46, 24192, 3}, "1g.24gb+me": {21, 46, 24192, 3}, "2g.48gb-me": {66, 94, 48512, 6}, "4g.96gb+gfx": {32, 188, 97408, 12}}
	for name, w := range want {
		p, _ := got.Profile(name)
		if g := [4]int{p.ID, p.Multiprocessors, int(p.MemoryMiB), p.MemorySlices()}; g != w {
			t.Errorf("%s: Id/SMs/MiB/size %v, want %v from the recording", name, g, w)
		}
		if p.Sources != (mig.ProfileSources{ID: "recorded", Memory: "recorded", Multiprocessors: "recorded", CopyEngines: "recorded",
			MediaEngines: "recorded", InstanceCount: "recorded", Placements: "recorded"}) {
			t.Errorf("%s: sources %+v, want all recorded", name, p.Sources)
		}
	}
	if got.MemorySlices != 12 {
		t.Errorf("memory slices %d, want 12", got.MemorySlices)
	}
	// A recorded profile the catalog lacks cannot be served (its compute profiles are missing).
	lacking := cat.Clone()
	lacking.Profiles = slices.DeleteFunc(lacking.Profiles, func(p mig.GIProfile) bool { return p.Name == "1g.24gb+me" })
	if _, err := recordedModel(lacking, mustRecordings(t)); err == nil || !strings.Contains(err.Error(), "1g.24gb+me") {
		t.Errorf("recordedModel without 1g.24gb+me: %v", err)
	}
}

// TestMIGModelSaysWhatIsInferred: a fake built without a recording says so per field.
func TestMIGModelSaysWhatIsInferred(t *testing.T) {
	for _, tt := range []struct {
		machine, profile string
		want             mig.ProfileSources
	}{
		{"dgx-a100-80gb", "1g.10gb", mig.ProfileSources{ID: "inferred", Memory: "inferred", Multiprocessors: "inferred", CopyEngines: "inferred", MediaEngines: "inferred", InstanceCount: "documented", Placements: "inferred"}},
		{"dgx-b200", "3g.90gb", mig.ProfileSources{ID: "inferred", Memory: "inferred", Multiprocessors: "inferred", CopyEngines: "documented", MediaEngines: "inferred", InstanceCount: "documented", Placements: "inferred"}},
		{"dgx-h200", "1g.18gb", mig.ProfileSources{ID: "recorded", Memory: "recorded", Multiprocessors: "recorded", CopyEngines: "recorded", MediaEngines: "recorded", InstanceCount: "recorded", Placements: "inferred"}},
		{"rtx-pro-6000x4", "2g.48gb+me.all", mig.ProfileSources{ID: "recorded", Memory: "recorded", Multiprocessors: "recorded", CopyEngines: "recorded", MediaEngines: "recorded", InstanceCount: "recorded", Placements: "recorded"}},
	} {
		m := mustNew(t, tt.machine).MIGModel(0)
		p, ok := m.Profile(tt.profile)
		if !ok {
			t.Fatalf("%s: no %s", tt.machine, tt.profile)
		}
		if diff := cmp.Diff(tt.want, p.Sources); diff != "" {
			t.Errorf("%s %s sources (-want +got):\n%s", tt.machine, tt.profile, diff)
		}
	}
	if m := mustNew(t, "l4x8").MIGModel(0); m != nil {
		t.Errorf("L4 has a MIG model: %v", m.Name)
	}
}

func TestWithMIGProfileEdit(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb", WithMIGProfileEdit("1g.5gb", func(p *mig.GIProfile) {
		p.MemoryMiB = 4608
		p.Placements = p.Placements[:2]
	}))
	d := dev(t, m, 3)
	info := giInfo(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	pls, _ := d.GetGpuInstancePossiblePlacements(&info)
	if info.MemorySizeMB != 4608 || len(pls) != 2 {
		t.Errorf("edited 1g.5gb: %d MiB, %d placements; want 4608, 2", info.MemorySizeMB, len(pls))
	}
	if _, err := New("dgx-a100-40gb", WithMIGProfileEdit("1g.24gb", func(*mig.GIProfile) {})); err == nil {
		t.Error("editing a profile no GPU has succeeded")
	}
	if _, err := New("dgx-a100-40gb", WithMIGProfileEdit("1g.5gb", nil)); err == nil {
		t.Error("a nil edit succeeded")
	}
}
