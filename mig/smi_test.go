package mig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A narrow (pre-R535) and a wide (R580+) table, each with two profiles; values typed from the
// layout nvidia-smi prints, not from the parser.
const (
	narrowLGIP = `
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
|                                                             1     0     0   |
+-----------------------------------------------------------------------------+
|   1  MIG 7g.40gb        0     0/1        39.25      Yes    98     5     0   |
|                                                             7     1     1   |
+-----------------------------------------------------------------------------+`
	wideLGIP = `
    +-------------------------------------------------------------------------------+
    | GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |
    |                                Free/Total   GiB              CE    JPEG  OFA  |
    |===============================================================================|
    |   0  MIG 1g.24gb+me.all  65     1/1        23.62      No     46     4     4   |
    |                                                               1     4     1   |
    +-------------------------------------------------------------------------------+`
)

func TestParseSMIProfiles(t *testing.T) {
	got, err := ParseSMIProfiles(narrowLGIP + wideLGIP)
	if err != nil {
		t.Fatal(err)
	}
	want := []SMIProfile{
		{GPU: 0, Name: "1g.5gb", ID: 19, Free: 7, Total: 7, MemoryGiB: "4.75", Multiprocessors: 14, CopyEngines: 1},
		{GPU: 1, Name: "7g.40gb", ID: 0, Free: 0, Total: 1, MemoryGiB: "39.25", P2P: true, Multiprocessors: 98, Decoders: 5, CopyEngines: 7, JpegEngines: 1, OfaEngines: 1},
		{GPU: 0, Name: "1g.24gb+me.all", ID: 65, Free: 1, Total: 1, MemoryGiB: "23.62", Multiprocessors: 46, Decoders: 4, Encoders: 4, CopyEngines: 1, JpegEngines: 4, OfaEngines: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSMIProfiles (-want +got):\n%s", diff)
	}
}

func TestParseSMIProfilesErrors(t *testing.T) {
	row := "|   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |"
	second := "|                                                             1     0     0   |"
	tests := map[string]struct{ text, want string }{
		"no rows":        {"| GPU instance profiles: |", "no profile rows"},
		"no second line": {row, "no second line"},
		"short second":   {row + "\n|  1  0  |", "want the CE, JPEG and OFA counts"},
		"bad P2P":        {strings.Replace(row, "No ", "Na ", 1) + "\n" + second, "P2P column"},
		"bad name":       {strings.Replace(row, "1g.5gb ", "1x.5gb ", 1) + "\n" + second, "invalid MIG profile"},
		"bad memory":     {strings.Replace(row, "4.75", "4.7x", 1) + "\n" + second, "not a positive GiB value"},
		"missing column": {strings.Replace(row, "7/7 ", "", 1) + "\n" + second, "want 10 columns"},
	}
	for name, tt := range tests {
		if _, err := ParseSMIProfiles(tt.text); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tt.want)
		}
	}
}

func TestParseSMIPlacements(t *testing.T) {
	got, err := ParseSMIPlacements("GPU  0 Profile ID 14 Placements: {0,3,6,9}:3\n\nGPU  1 Profile ID  0 Placement : {0}:12\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []SMIPlacements{
		{GPU: 0, ProfileID: 14, Placements: []Placement{{0, 3}, {3, 3}, {6, 3}, {9, 3}}},
		{GPU: 1, ProfileID: 0, Placements: []Placement{{0, 12}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSMIPlacements (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "GPU 0 Profile ID 5 Placements: {0,2}:2 -> note", "GPU 0 Profile ID 5 Placements: {0,2}:0"} {
		if _, err := ParseSMIPlacements(bad); err == nil {
			t.Errorf("ParseSMIPlacements(%q) succeeded", bad)
		}
	}
}

func TestParseSMIInstances(t *testing.T) {
	got, err := ParseSMIInstances(`
+---------------------------------------------------------+
| GPU instances:                                          |
| GPU   Name               Profile  Instance   Placement  |
|                            ID       ID       Start:Size |
|=========================================================|
|   0  MIG 2g.48gb            5        1          0:6     |
+---------------------------------------------------------+`)
	if err != nil {
		t.Fatal(err)
	}
	want := []SMIInstance{{GPU: 0, Name: "2g.48gb", ProfileID: 5, InstanceID: 1, Placement: Placement{0, 6}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSMIInstances (-want +got):\n%s", diff)
	}
	if _, err := ParseSMIInstances("|   0  MIG 2g.48gb   5   1   0-6  |"); err == nil {
		t.Error("a malformed -lgi row parsed")
	}
}

func TestMemoryMiBFromGiB(t *testing.T) {
	// Expectations are MiB sizes seen in nvidia-smi's MIG device table or reported by CUDA for the
	// same profiles (A100 4864/9856, A30 5952/11968, H100 NVL 11008/22144/47488, RTX PRO 24192).
	for printed, want := range map[string]uint64{
		"4.75": 4864, "9.62": 9856, "5.81": 5952, "11.69": 11968, "10.75": 11008, "21.62": 22144,
		"46.38": 47488, "23.62": 24192,
	} {
		if got, err := MemoryMiBFromGiB(printed); err != nil || got != want {
			t.Errorf("MemoryMiBFromGiB(%q) = %d, %v; want %d", printed, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1", "x", "Inf"} {
		if _, err := MemoryMiBFromGiB(bad); err == nil {
			t.Errorf("MemoryMiBFromGiB(%q) succeeded", bad)
		}
	}
	// Round trip: every MiB value prints back to the same GiB text.
	for mib := uint64(8); mib < 200*1024; mib += 7 { // from 8 MiB: smaller sizes print as 0.00
		printed := FormatGiB(mib)
		got, err := MemoryMiBFromGiB(printed)
		if err != nil || FormatGiB(got) != printed {
			t.Fatalf("MemoryMiBFromGiB(%q) = %d, %v: prints as %q", printed, got, err, FormatGiB(got))
		}
	}
}

func TestModelFromSMI(t *testing.T) {
	profiles := []SMIProfile{
		{Name: "1g.10gb", ID: 19, Total: 7, MemoryGiB: "9.75", Multiprocessors: 16},
		{Name: "1g.20gb", ID: 15, Total: 4, MemoryGiB: "19.62", Multiprocessors: 26},
		{Name: "1g.10gb+me", ID: 20, Total: 1, MemoryGiB: "9.75", Multiprocessors: 16},
		{Name: "2g.48gb-me", ID: 66, Total: 2, MemoryGiB: "47.38", Multiprocessors: 94},
		{Name: "4g.96gb+gfx", ID: 32, Total: 1, MemoryGiB: "95.12", Multiprocessors: 188},
		{GPU: 1, Name: "7g.80gb", ID: 0, Total: 1, MemoryGiB: "79.25"},
	}
	placements := []SMIPlacements{{ProfileID: 15, Placements: []Placement{{0, 2}, {6, 2}}}, {GPU: 1, ProfileID: 0}}
	m, err := ModelFromSMI("X", 81559, 0, profiles, placements)
	if err != nil {
		t.Fatal(err)
	}
	// Enums from nvml.h: 1_SLICE 0, 1_SLICE_REV2 9, 1_SLICE_REV1 7, 2_SLICE_NO_ME 14, 4_SLICE_GFX 12.
	type row struct {
		Name      string
		Enum, ID  int
		MiB       uint64
		Placement Source
	}
	var got []row
	for _, p := range m.Profiles {
		got = append(got, row{p.Name, p.Enum, p.ID, p.MemoryMiB, p.Sources.Placements})
		if p.Sources.ID != SourceRecorded || p.Sources.Memory != SourceRecorded {
			t.Errorf("%s sources %+v, want recorded", p.Name, p.Sources)
		}
	}
	want := []row{
		{"1g.10gb", 0, 19, 9984, ""}, {"1g.20gb", 9, 15, 20096, SourceRecorded}, {"1g.10gb+me", 7, 20, 9984, ""},
		{"2g.48gb-me", 14, 66, 48512, ""}, {"4g.96gb+gfx", 12, 32, 97408, ""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ModelFromSMI (-want +got):\n%s", diff)
	}
	if m.MemorySlices != 8 || m.ComputeSlices != 4 {
		t.Errorf("slices %d/%d, want 8/4", m.MemorySlices, m.ComputeSlices)
	}
	if _, err := ModelFromSMI("X", 1, 0, profiles, []SMIPlacements{{ProfileID: 99}}); err == nil {
		t.Error("placements of an unlisted profile accepted")
	}
	if _, err := ModelFromSMI("X", 1, 3, profiles, nil); err == nil {
		t.Error("a GPU without rows accepted")
	}
	dup := append(profiles[:1:1], SMIProfile{Name: "2g.20gb", ID: 19, MemoryGiB: "19.62"})
	if _, err := ModelFromSMI("X", 1, 0, dup, nil); err == nil {
		t.Error("a duplicate profile Id accepted")
	}
}
