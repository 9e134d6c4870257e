package mig

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLayout(t *testing.T) {
	got, err := ParseLayout(" 3g.20gb, 2g.10gb@4 ,1g.5gb,1g.5gb,2g.48gb+gfx,me@2")
	if err != nil {
		t.Fatal(err)
	}
	want := []Instance{{Profile: "3g.20gb"}, At("2g.10gb", 4), {Profile: "1g.5gb"}, {Profile: "1g.5gb"}, At("2g.48gb+gfx,me", 2)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseLayout (-want +got):\n%s", diff)
	}
	if s := FormatLayout(got); s != "3g.20gb,2g.10gb@4,1g.5gb,1g.5gb,2g.48gb+gfx,me@2" {
		t.Errorf("FormatLayout = %q", s)
	}
	for _, bad := range []string{"", "3g.20gb,,1g.5gb", "3g.20gb@x", "3g.20gb@-1", "3g.20GB", "me"} {
		if _, err := ParseLayout(bad); err == nil {
			t.Errorf("ParseLayout(%q) succeeded", bad)
		}
	}
}

// TestSeed003 checks the five options of seed 003 on an 80GB A100 (all valid there) and close
// variants that break a geometry rule.
func TestSeed003(t *testing.T) {
	m := mustLookup(t, "NVIDIA A100-SXM4-80GB")
	tests := []struct {
		name   string
		layout string
		kind   ConflictKind // "" when valid
	}{
		{"A: 7 x 1g.10gb", "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb", ""},
		{"B: 3 x 2g.20gb + 1 x 1g.10gb", "2g.20gb,2g.20gb,2g.20gb,1g.10gb", ""},
		{"C: 2 x 3g.40gb", "3g.40gb,3g.40gb", ""},
		{"D: 4g.40gb + 3g.40gb", "4g.40gb,3g.40gb", ""},
		{"E: 7g.80gb", "7g.80gb", ""},
		// Variants: one instance too many, or slices that do not line up.
		{"8 x 1g.10gb", "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb", ConflictCount},
		{"3 x 2g.20gb + 2 x 1g.10gb", "2g.20gb,2g.20gb,2g.20gb,1g.10gb,1g.10gb", ConflictComputeSlices},
		{"2 x 3g.40gb + 1g.10gb", "3g.40gb,3g.40gb,1g.10gb", ConflictNoFit},
		{"3 x 3g.40gb", "3g.40gb,3g.40gb,3g.40gb", ConflictCount},
		{"2 x 4g.40gb", "4g.40gb,4g.40gb", ConflictCount},
		{"4g.40gb + 3g.40gb@0", "4g.40gb,3g.40gb@0", ConflictNoFit},
		{"7g.80gb + 1g.10gb", "7g.80gb,1g.10gb", ConflictComputeSlices},
		{"1g.5gb (a 40GB name)", "1g.5gb", ConflictUnknownProfile},
	}
	for _, tt := range tests {
		layout, err := ParseLayout(tt.layout)
		if err != nil {
			t.Fatal(err)
		}
		placed, err := Validate(m, layout)
		if tt.kind == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
				continue
			}
			// The returned assignment must itself be a valid fully placed layout.
			if _, err := Validate(m, placed); err != nil || len(placed) != len(layout) {
				t.Errorf("%s: assignment %s invalid: %v", tt.name, FormatLayout(placed), err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Kind != tt.kind {
			t.Errorf("%s: error %v, want kind %s", tt.name, err, tt.kind)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	m := mustLookup(t, "A100-SXM4-40GB")
	tests := []struct {
		layout    string
		kind      ConflictKind
		instances []int
		slices    []int
		contains  []string
	}{
		{"3g.20gb@0,2g.10gb@2", ConflictOverlap, []int{0, 1}, []int{2, 3}, []string{"#0 3g.20gb@0", "#1 2g.10gb@2", "slices 2,3"}},
		{"3g.20gb@2", ConflictPlacement, []int{0}, nil, []string{"3g.20gb at 0:4,4:4"}},
		{"1g.5gb@7", ConflictPlacement, []int{0}, nil, []string{"7:1"}},
		{"1g.5gb+me,1g.5gb+me", ConflictCount, []int{0, 1}, nil, []string{"at most 1"}},
		{"4g.20gb,4g.20gb", ConflictCount, []int{0, 1}, nil, []string{"2 instances of 4g.20gb"}},
		{"1g.20gb", ConflictUnknownProfile, []int{0}, nil, []string{`"1g.20gb"`, "1g.5gb, 1g.5gb+me"}},
		{"1c.3g.20gb", ConflictUnknownProfile, []int{0}, nil, []string{"3g.20gb"}},
		{"4g.20gb,3g.20gb@0", ConflictNoFit, []int{0}, []int{4, 5, 6, 7}, []string{"4g.20gb at 0:4"}},
		{"3g.20gb,3g.20gb,1g.5gb", ConflictNoFit, []int{0, 1, 2}, []int{0, 1, 2, 3, 4, 5, 6, 7}, []string{"needs 9 memory slices"}},
		{"3g.20gb,3g.20gb,2g.10gb", ConflictComputeSlices, []int{0, 1, 2}, nil, []string{"need 8 compute slices"}},
	}
	for _, tt := range tests {
		layout, err := ParseLayout(tt.layout)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Validate(m, layout)
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: error %v, want *ValidationError", tt.layout, err)
			continue
		}
		got := struct {
			Kind      ConflictKind
			Instances []int
			Slices    []int
		}{ve.Kind, ve.Instances, ve.Slices}
		want := got
		want.Kind, want.Instances, want.Slices = tt.kind, tt.instances, tt.slices
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.layout, diff)
		}
		for _, s := range tt.contains {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not contain %q", tt.layout, err, s)
			}
		}
		if !strings.HasPrefix(err.Error(), "A100-SXM4-40GB: ") {
			t.Errorf("%s: error %q does not name the model", tt.layout, err)
		}
	}
}

func TestValidateMultipleErrorsJoined(t *testing.T) {
	m := mustLookup(t, "A100-SXM4-40GB")
	_, err := Validate(m, []Instance{At("3g.20gb", 1), {Profile: "bogus"}})
	if err == nil || !strings.Contains(err.Error(), "bogus") || !strings.Contains(err.Error(), "placement 1:4") {
		t.Errorf("error %v should report both problems", err)
	}
}

// TestMediaRules checks media-engine exclusivity (nvml.h: +me.all "prevents allocation of all but
// _NO_ME profiles"; one +me per GPU).
func TestMediaRules(t *testing.T) {
	rtx := mustLookup(t, "RTX PRO 6000 Blackwell")
	a30 := mustLookup(t, "A30")
	tests := []struct {
		m      *Model
		layout string
		ok     bool
	}{
		{rtx, "1g.24gb+me.all,1g.24gb-me,2g.48gb-me", true},
		{rtx, "1g.24gb+me.all,1g.24gb", false},
		{rtx, "1g.24gb+me.all,1g.24gb+gfx", false},
		{rtx, "2g.48gb+me.all,1g.24gb+me.all", false},
		{rtx, "1g.24gb,1g.24gb+gfx,2g.48gb-me", true},
		{rtx, "4g.96gb+gfx", true},
		{a30, "1g.6gb+me,2g.12gb+me", false},
		{a30, "1g.6gb+me,1g.6gb,2g.12gb", true},
	}
	for _, tt := range tests {
		layout, _ := ParseLayout(tt.layout)
		_, err := Validate(tt.m, layout)
		if (err == nil) != tt.ok {
			t.Errorf("%s %s: err = %v, want ok=%v", tt.m.Name, tt.layout, err, tt.ok)
		}
		var ve *ValidationError
		if err != nil && (!errors.As(err, &ve) || ve.Kind != ConflictMedia) {
			t.Errorf("%s %s: err = %v, want media conflict", tt.m.Name, tt.layout, err)
		}
	}
}

// TestLayoutCounts uses the research's exhaustive counts for A100-40GB (research §1.5).
func TestLayoutCounts(t *testing.T) {
	m := mustLookup(t, "A100-SXM4-40GB")
	classic := WithProfiles("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
	for _, tt := range []struct {
		name           string
		opts           []LayoutOption
		valid, maximal int
	}{
		{"five classic profiles", []LayoutOption{classic}, 297, 19},
		{"all seven profiles", nil, 2318, 239},
	} {
		v, mx, err := CountLayouts(m, tt.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if v != tt.valid || mx != tt.maximal {
			t.Errorf("%s: %d valid, %d maximal; want %d, %d", tt.name, v, mx, tt.valid, tt.maximal)
		}
	}
	all, _ := Layouts(m, classic)
	if len(all) != 297 {
		t.Errorf("Layouts: %d", len(all))
	}
	for _, l := range all {
		if _, err := Validate(m, l); err != nil {
			t.Errorf("enumerated layout %s invalid: %v", FormatLayout(l), err)
		}
	}
	// The 14 distinct maximal multisets listed in the research.
	want := []string{
		"1g.5gb×7", "1g.5gb×5 2g.10gb×1", "1g.5gb×4 3g.20gb×1", "1g.5gb×3 2g.10gb×2",
		"1g.5gb×3 3g.20gb×1", "1g.5gb×3 4g.20gb×1", "1g.5gb×2 2g.10gb×1 3g.20gb×1",
		"1g.5gb×1 2g.10gb×3", "1g.5gb×1 2g.10gb×1 3g.20gb×1", "1g.5gb×1 2g.10gb×1 4g.20gb×1",
		"2g.10gb×2 3g.20gb×1", "3g.20gb×2", "3g.20gb×1 4g.20gb×1", "7g.40gb×1",
	}
	maxl, _ := MaximalLayouts(m, classic)
	var got []string
	for _, l := range maxl {
		if s := multiset(l); !slices.Contains(got, s) {
			got = append(got, s)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("maximal multisets (-research +got):\n%s", diff)
	}
	if _, err := Layouts(m, WithProfiles("1g.6gb")); err == nil {
		t.Error("unknown profile in WithProfiles accepted")
	}
}

func multiset(l []Instance) string {
	var parts []string
	i := 0
	for i < len(l) {
		j := i
		for j < len(l) && l[j].Profile == l[i].Profile {
			j++
		}
		parts = append(parts, l[i].Profile+"×"+itoa(j-i))
		i = j
	}
	return strings.Join(parts, " ")
}

func TestDiagram(t *testing.T) {
	m := mustLookup(t, "A100-SXM4-40GB")
	got := Diagram(m, []Instance{At("3g.20gb", 0), At("2g.10gb", 4), At("1g.5gb", 6)})
	want := "A100-SXM4-40GB: 8 memory slices, 7 compute slices\n" +
		"           | 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 |\n" +
		"3g.20gb@0  |###############|   |   |   |   |\n" +
		"2g.10gb@4  |   |   |   |   |#######|   |   |\n" +
		"1g.5gb@6   |   |   |   |   |   |   |###|   |\n" +
		"free memory slices: 7\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Diagram (-want +got):\n%s", diff)
	}
	bad := Diagram(m, []Instance{At("3g.20gb", 0), At("2g.10gb", 2)})
	if !strings.Contains(bad, "\ninvalid: ") || !strings.Contains(bad, "2g.10gb@2") {
		t.Errorf("Diagram of invalid layout:\n%s", bad)
	}
}
