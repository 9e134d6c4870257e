package mig

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func mustLookup(t testing.TB, name string) *Model {
	t.Helper()
	m, err := Lookup(name)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", name, err)
	}
	return m
}

func TestLookup(t *testing.T) {
	tests := []struct {
		query string
		want  string
	}{
		{"NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"},
		{"A100-SXM4-40GB", "A100-SXM4-40GB"},
		{"a100-sxm4-40gb", "A100-SXM4-40GB"},
		{"  nvidia   A100-PCIE-40GB ", "A100-SXM4-40GB"},
		{"NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"},
		{"NVIDIA A100 80GB PCIe", "A100 80GB PCIe"},
		{"NVIDIA A30", "A30"},
		{"NVIDIA H100 80GB HBM3", "H100 80GB HBM3"},
		{"h100 80gb hbm3", "H100 80GB HBM3"},
		{"NVIDIA H100 PCIe", "H100 PCIe"},
		{"NVIDIA H100 NVL", "H100 NVL"},
		{"NVIDIA H200", "H200"},
		{"NVIDIA H200 NVL", "H200 NVL"},
		{"NVIDIA B200", "B200"},
		{"NVIDIA GB200", "GB200"},
		{"NVIDIA H20", "H20"},
		{"NVIDIA GH200 480GB", "GH200 96GB"},
		{"NVIDIA GH200 144G HBM3e", "GH200 144G HBM3e"},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell"},
		{"RTX PRO 6000 Blackwell", "RTX PRO 6000 Blackwell"},
	}
	for _, tt := range tests {
		m, err := Lookup(tt.query)
		if err != nil {
			t.Errorf("Lookup(%q): %v", tt.query, err)
			continue
		}
		if m.Name != tt.want {
			t.Errorf("Lookup(%q).Name = %q, want %q", tt.query, m.Name, tt.want)
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	for _, q := range []string{"NVIDIA L4", "Tesla T4", "", "A100"} {
		_, err := Lookup(q)
		var ue *UnknownModelError
		if !errors.As(err, &ue) {
			t.Fatalf("Lookup(%q) error = %v, want *UnknownModelError", q, err)
		}
		for _, known := range []string{"A100-SXM4-40GB", "H100 80GB HBM3", "B200", "A30"} {
			if !strings.Contains(err.Error(), known) {
				t.Errorf("Lookup(%q) error %q does not list %q", q, err, known)
			}
		}
	}
}

func TestLookupPCIDeviceID(t *testing.T) {
	// PCI ids from mig-parted's built-in config (research §1.6, §3.3).
	tests := map[uint32]string{
		0x20B010DE: "A100-SXM4-40GB",
		0x20B210DE: "A100-SXM4-80GB",
		0x20B510DE: "A100 80GB PCIe",
		0x20B710DE: "A30",
		0x233010DE: "H100 80GB HBM3",
		0x232110DE: "H100 NVL",
		0x233510DE: "H200",
		0x233B10DE: "H200 NVL",
		0x290110DE: "B200",
		0x294110DE: "GB200",
		0x232910DE: "H20",
		0x2BB510DE: "RTX PRO 6000 Blackwell",
	}
	for id, want := range tests {
		m, err := LookupPCIDeviceID(id)
		if err != nil {
			t.Errorf("LookupPCIDeviceID(%#x): %v", id, err)
			continue
		}
		if m.Name != want {
			t.Errorf("LookupPCIDeviceID(%#x) = %q, want %q", id, m.Name, want)
		}
	}
	if _, err := LookupPCIDeviceID(0x27B810DE); err == nil { // L4
		t.Error("LookupPCIDeviceID(L4) succeeded")
	}
}

func TestModelsAreCopies(t *testing.T) {
	a := Models()
	a[0].Profiles[0].Placements[0].Start = 99
	a[0].Name = "changed"
	b := Models()
	if b[0].Name == "changed" || b[0].Profiles[0].Placements[0].Start == 99 {
		t.Fatal("Models() returned shared state")
	}
	m := mustLookup(t, "A100-SXM4-40GB")
	m.Profiles[0].InstanceCount = 0
	if mustLookup(t, "A100-SXM4-40GB").Profiles[0].InstanceCount != 7 {
		t.Fatal("Lookup returned shared state")
	}
}

// TestA100_40GBTable checks the A100-40GB entry against the research table (go-nvml dgxa100 data,
// NVIDIA's profile table) and the profile Ids nvidia-smi reports.
func TestA100_40GBTable(t *testing.T) {
	m := mustLookup(t, "A100-SXM4-40GB")
	p1 := []Placement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}
	want := []GIProfile{
		{Name: "1g.5gb", Enum: 0, ID: 19, ComputeSlices: 1, MemoryMiB: 4864, Multiprocessors: 14, CopyEngines: 1, InstanceCount: 7, Placements: p1},
		{Name: "1g.5gb+me", Enum: 7, ID: 20, ComputeSlices: 1, MemoryMiB: 4864, Multiprocessors: 14, CopyEngines: 1, Decoders: 1, JpegEngines: 1, OfaEngines: 1, InstanceCount: 1, Placements: p1},
		{Name: "1g.10gb", Enum: 9, ID: 15, ComputeSlices: 1, MemoryMiB: 9856, Multiprocessors: 14, CopyEngines: 1, Decoders: 1, InstanceCount: 4, Placements: []Placement{{0, 2}, {2, 2}, {4, 2}, {6, 2}}},
		{Name: "2g.10gb", Enum: 1, ID: 14, ComputeSlices: 2, MemoryMiB: 9856, Multiprocessors: 28, CopyEngines: 2, Decoders: 1, InstanceCount: 3, Placements: []Placement{{0, 2}, {2, 2}, {4, 2}}},
		{Name: "3g.20gb", Enum: 2, ID: 9, ComputeSlices: 3, MemoryMiB: 19968, Multiprocessors: 42, CopyEngines: 3, Decoders: 2, InstanceCount: 2, Placements: []Placement{{0, 4}, {4, 4}}},
		{Name: "4g.20gb", Enum: 3, ID: 5, ComputeSlices: 4, MemoryMiB: 19968, Multiprocessors: 56, CopyEngines: 4, Decoders: 2, InstanceCount: 1, Placements: []Placement{{0, 4}}},
		{Name: "7g.40gb", Enum: 4, ID: 0, ComputeSlices: 7, MemoryMiB: 40192, Multiprocessors: 98, CopyEngines: 7, Decoders: 5, JpegEngines: 1, OfaEngines: 1, InstanceCount: 1, Placements: []Placement{{0, 8}}},
	}
	if diff := cmp.Diff(want, m.Profiles, cmpopts.IgnoreFields(GIProfile{}, "ComputeProfiles", "Sources")); diff != "" {
		t.Errorf("A100-SXM4-40GB profiles (-want +got):\n%s", diff)
	}
	if m.MemorySlices != 8 || m.ComputeSlices != 7 || m.MemoryMiB != 40960 || m.Multiprocessors != 108 ||
		m.CudaComputeCapability != "8.0" || m.Architecture != "Ampere" {
		t.Errorf("A100-SXM4-40GB whole-GPU data = %+v", m)
	}

	// CI profiles (research §1.6: slices/instances/SMs per GI).
	type ci struct{ Slices, Count, SM int }
	wantCI := map[string][]ci{
		"1g.5gb":  {{1, 1, 14}},
		"1g.10gb": {{1, 1, 14}},
		"2g.10gb": {{1, 2, 14}, {2, 1, 28}},
		"3g.20gb": {{1, 3, 14}, {2, 1, 28}, {3, 1, 42}},
		"4g.20gb": {{1, 4, 14}, {2, 2, 28}, {4, 1, 56}},
		"7g.40gb": {{1, 7, 14}, {2, 3, 28}, {3, 2, 42}, {4, 1, 56}, {7, 1, 98}},
	}
	for name, w := range wantCI {
		p, _ := m.Profile(name)
		var got []ci
		for _, c := range p.ComputeProfiles {
			got = append(got, ci{c.Slices, c.InstanceCount, c.Multiprocessors})
			if len(c.Placements) != c.InstanceCount {
				t.Errorf("%s CI %dc: %d placements for %d instances", name, c.Slices, len(c.Placements), c.InstanceCount)
			}
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s compute profiles (-want +got):\n%s", name, diff)
		}
	}
	p7, _ := m.Profile("7g.40gb")
	wantPl := map[int][]int{1: {0, 1, 2, 3, 4, 5, 6}, 2: {0, 2, 4}, 3: {0, 4}, 4: {0}, 7: {0}}
	for _, c := range p7.ComputeProfiles {
		if diff := cmp.Diff(wantPl[c.Slices], c.Placements); diff != "" {
			t.Errorf("7g %dc placements (-want +got):\n%s", c.Slices, diff)
		}
	}
}

// TestH100Table checks H100 80GB HBM3 against a published nvidia-smi mig -lgip listing.
func TestH100Table(t *testing.T) {
	m := mustLookup(t, "NVIDIA H100 80GB HBM3")
	type row struct {
		Name                      string
		ID, Count, SM             int
		GiB100                    uint64 // GiB × 100 as nvidia-smi prints it
		CE, DEC, ENC, JPEG, OFA   int
		PlacementSize, FirstStart int
	}
	want := []row{
		{"1g.10gb", 19, 7, 16, 975, 1, 1, 0, 1, 0, 1, 0},
		{"1g.10gb+me", 20, 1, 16, 975, 1, 1, 0, 1, 1, 1, 0},
		{"1g.20gb", 15, 4, 26, 1962, 1, 1, 0, 1, 0, 2, 0},
		{"2g.20gb", 14, 3, 32, 1962, 2, 2, 0, 2, 0, 2, 0},
		{"3g.40gb", 9, 2, 60, 3950, 3, 3, 0, 3, 0, 4, 0},
		{"4g.40gb", 5, 1, 64, 3950, 4, 4, 0, 4, 0, 4, 0},
		{"7g.80gb", 0, 1, 132, 7925, 8, 7, 0, 7, 1, 8, 0},
	}
	var got []row
	for _, p := range m.Profiles {
		got = append(got, row{p.Name, p.ID, p.InstanceCount, p.Multiprocessors,
			uint64(math.Floor(float64(p.MemoryMiB)*100/1024 + 0.5)),
			p.CopyEngines, p.Decoders, p.Encoders, p.JpegEngines, p.OfaEngines,
			p.MemorySlices(), p.Placements[0].Start})
	}
	// nvidia-smi prints 2 decimals: 19.625 GiB shows as 19.62, so compare within 1/100.
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b uint64) bool { return a-b <= 1 || b-a <= 1 })); diff != "" {
		t.Errorf("H100 80GB HBM3 (-want +got):\n%s", diff)
	}
}

// migPartedCounts are the instance counts of mig-parted's built-in all-<profile> configs
// (research §1.6 and §3.3), per model.
var migPartedCounts = map[string]map[string]int{
	"A100-SXM4-40GB":   {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
	"A100-SXM4-80GB":   {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
	"A100 80GB PCIe":   {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
	"A30":              {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
	"H100 80GB HBM3":   {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
	"H100 PCIe":        {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
	"H100 NVL":         {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},
	"H100 96GB":        {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1},
	"GH200 96GB":       {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1},
	"H20":              {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1},
	"H200":             {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
	"H200 NVL":         {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
	"GH200 144G HBM3e": {"1g.18gb": 7, "1g.18gb+me": 1, "1g.36gb": 4, "2g.36gb": 3, "3g.72gb": 2, "4g.72gb": 1, "7g.144gb": 1},
	"B200":             {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1},
	"GB200":            {"1g.23gb": 7, "1g.23gb+me": 1, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "4g.93gb": 1, "7g.186gb": 1},
	"RTX PRO 6000 Blackwell": {
		"1g.24gb": 4, "1g.24gb+gfx": 4, "1g.24gb-me": 4, "1g.24gb+me.all": 1,
		"2g.48gb": 2, "2g.48gb+gfx": 2, "2g.48gb-me": 2, "2g.48gb+me.all": 1,
		"4g.96gb": 1, "4g.96gb+gfx": 1,
	},
}

// beyondMigParted are profiles nvidia-smi -lgip lists but mig-parted's configs do not name (no
// all-<profile> config exists for them), with their instance counts from the recording.
var beyondMigParted = map[string]map[string]int{
	"RTX PRO 6000 Blackwell": {"1g.24gb+me": 1},
}

func TestCatalogMatchesMigParted(t *testing.T) {
	models := Models()
	if len(models) != len(migPartedCounts) {
		t.Errorf("catalog has %d models, test table %d", len(models), len(migPartedCounts))
	}
	for _, m := range models {
		want, ok := migPartedCounts[m.Name]
		if !ok {
			t.Errorf("model %q not in test table", m.Name)
			continue
		}
		got := map[string]int{}
		for _, p := range m.Profiles {
			if n, ok := beyondMigParted[m.Name][p.Name]; ok {
				if p.InstanceCount != n {
					t.Errorf("%s %s: instance count %d, recorded %d", m.Name, p.Name, p.InstanceCount, n)
				}
				continue
			}
			got[p.Name] = p.InstanceCount
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s profile counts (-mig-parted +catalog):\n%s", m.Name, diff)
		}
	}
}

// gbFromMemory applies the rounding rule NVIDIA's naming uses (research §2): the fraction of the
// GPU's memory, rounded up to a multiple of 1/8, times the GPU memory in GiB rounded up.
func gbFromMemory(migMiB, totalMiB uint64) int {
	frac := math.Ceil(float64(migMiB)/float64(totalMiB)*8) / 8
	return int(math.Round(frac * math.Ceil(float64(totalMiB)/1024)))
}

// enumSlices is the compute-slice count of each GPU_INSTANCE_PROFILE_* enum (nvml.h).
var enumSlices = map[int]int{0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6, 7: 1, 8: 2, 9: 1, 10: 1, 11: 2, 12: 4, 13: 1, 14: 2, 15: 1, 16: 2, 17: 3}

func TestCatalogInvariants(t *testing.T) {
	for _, m := range Models() {
		names, ids, enums := map[string]bool{}, map[int]bool{}, map[int]bool{}
		var maxEnd, maxG int
		for _, p := range m.Profiles {
			where := m.Name + " " + p.Name
			if names[p.Name] || ids[p.ID] || enums[p.Enum] {
				t.Errorf("%s: duplicate name, id %d or enum %d", where, p.ID, p.Enum)
			}
			names[p.Name], ids[p.ID], enums[p.Enum] = true, true, true
			prof, err := ParseProfile(p.Name)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if prof.String() != p.Name || prof.C != 0 || prof.G != p.ComputeSlices {
				t.Errorf("%s: parsed %+v, compute slices %d", where, prof, p.ComputeSlices)
			}
			if enumSlices[p.Enum] != p.ComputeSlices {
				t.Errorf("%s: enum %d has %d slices, profile %d", where, p.Enum, enumSlices[p.Enum], p.ComputeSlices)
			}
			if got := gbFromMemory(p.MemoryMiB, m.MemoryMiB); got != prof.GB {
				t.Errorf("%s: %d MiB of %d rounds to %dgb", where, p.MemoryMiB, m.MemoryMiB, got)
			}
			if p.MemoryMiB > m.MemoryMiB || p.Multiprocessors > m.Multiprocessors || p.Multiprocessors <= 0 {
				t.Errorf("%s: memory %d / SMs %d exceed the GPU's", where, p.MemoryMiB, p.Multiprocessors)
			}
			if p.InstanceCount < 1 || p.InstanceCount > len(p.Placements) {
				t.Errorf("%s: instance count %d with %d placements", where, p.InstanceCount, len(p.Placements))
			}
			size := p.MemorySlices()
			for _, pl := range p.Placements {
				if pl.Size != size || pl.Start%size != 0 || pl.End() > m.MemorySlices || pl.Start < 0 {
					t.Errorf("%s: bad placement %+v", where, pl)
				}
				maxEnd = max(maxEnd, pl.End())
			}
			maxG = max(maxG, p.ComputeSlices)
			if len(p.ComputeProfiles) == 0 || p.ComputeProfiles[len(p.ComputeProfiles)-1].Slices != p.ComputeSlices {
				t.Errorf("%s: compute profiles %+v lack the full-size one", where, p.ComputeProfiles)
			}
			for _, c := range p.ComputeProfiles {
				for _, s := range c.Placements {
					if s < 0 || s+c.Slices > p.ComputeSlices {
						t.Errorf("%s: CI %dc placement %d outside the GI", where, c.Slices, s)
					}
				}
			}
		}
		if maxEnd != m.MemorySlices || maxG != m.ComputeSlices {
			t.Errorf("%s: slices %d/%d, profiles reach %d/%d", m.Name, m.MemorySlices, m.ComputeSlices, maxEnd, maxG)
		}
		if _, err := LookupPCIDeviceID(m.PCIDeviceIDs[0]); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
	}
}

func TestModelProfileLookups(t *testing.T) {
	m := mustLookup(t, "A100-SXM4-40GB")
	for _, tt := range []struct {
		query string
		want  string
		ok    bool
	}{
		{"1g.5gb", "1g.5gb", true},
		{"1c.1g.5gb", "1g.5gb", true},
		{"1c.3g.20gb", "3g.20gb", true},
		{"1g.5gb+me", "1g.5gb+me", true},
		{"1g.10gb", "1g.10gb", true},
		{"1g.20gb", "", false},
		{"bogus", "", false},
	} {
		p, ok := m.Profile(tt.query)
		if ok != tt.ok || (ok && p.Name != tt.want) {
			t.Errorf("Profile(%q) = %v, %v; want %q, %v", tt.query, p, ok, tt.want, tt.ok)
		}
	}
	if p, ok := m.ProfileByID(9); !ok || p.Name != "3g.20gb" {
		t.Errorf("ProfileByID(9) = %v, %v", p, ok)
	}
	if p, ok := m.ProfileByEnum(9); !ok || p.Name != "1g.10gb" {
		t.Errorf("ProfileByEnum(9) = %v, %v", p, ok)
	}
	if _, ok := m.ProfileByID(1); ok {
		t.Error("ProfileByID(1) found a profile")
	}
	a30 := mustLookup(t, "A30")
	if p, ok := a30.ProfileByID(14); !ok || p.Name != "1g.6gb" {
		t.Errorf("A30 ProfileByID(14) = %v", p)
	}
	if p, ok := a30.ProfileByID(21); !ok || p.Name != "1g.6gb+me" {
		t.Errorf("A30 ProfileByID(21) = %v", p)
	}
}
