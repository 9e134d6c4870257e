package mig

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseProfile(t *testing.T) {
	tests := []struct {
		in   string
		want Profile
	}{
		{"1g.5gb", Profile{G: 1, GB: 5}},
		{"1c.2g.10gb", Profile{C: 1, G: 2, GB: 10}},
		{"1c.1g.5gb", Profile{C: 1, G: 1, GB: 5}},
		{"7g.40gb", Profile{G: 7, GB: 40}},
		{"7g.141gb", Profile{G: 7, GB: 141}},
		{"1g.10gb+me", Profile{G: 1, GB: 10, Attributes: []string{"me"}}},
		{"1g.5gb-me", Profile{G: 1, GB: 5, NegAttributes: []string{"me"}}},
		{"1g.24gb+me.all", Profile{G: 1, GB: 24, Attributes: []string{"me.all"}}},
		{"1g.24gb+gfx", Profile{G: 1, GB: 24, Attributes: []string{"gfx"}}},
		{"2g.48gb+gfx,me", Profile{G: 2, GB: 48, Attributes: []string{"gfx", "me"}}},
		{"4c.7g.80gb", Profile{C: 4, G: 7, GB: 80}},
	}
	for _, tt := range tests {
		got, err := ParseProfile(tt.in)
		if err != nil {
			t.Errorf("ParseProfile(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseProfile(%q) (-want +got):\n%s", tt.in, diff)
		}
		if s := got.String(); s != tt.in {
			t.Errorf("ParseProfile(%q).String() = %q", tt.in, s)
		}
	}
}

func TestParseProfileErrors(t *testing.T) {
	tests := []struct {
		in  string
		pos int
	}{
		{"", 0},
		{"g.5gb", 0},
		{"1x.5gb", 1},
		{"1g5gb", 2},
		{"1g.5GB", 4},
		{"1g.5g", 5},
		{"1g.gb", 3},
		{"0g.5gb", 0},
		{"01g.5gb", 0},
		{"1g.05gb", 3},
		{"3g.20gb ", 7},
		{" 3g.20gb", 0},
		{"1g.5gb+", 7},
		{"1g.5gb-", 7},
		{"1g.5gb+me,me", 10},
		{"1g.5gb+me+x", 9},
		{"1g.5gb+me,", 10},
		{"1g.5gb+,me", 7},
		{"1g.5gb+1me", 7},
		{"1g.5gb+me.", 9},
		{"1g.5gb+me..all", 10},
		{"2c.1g.5gb", 0},
		{"1c.2c.10gb", 4},
		{"1c.2g.10gb.x", 10},
		{"99999999g.5gb", 0},
		{"1g.5gb\x00", 6},
	}
	for _, tt := range tests {
		_, err := ParseProfile(tt.in)
		var se *ProfileSyntaxError
		if !errors.As(err, &se) {
			t.Errorf("ParseProfile(%q) error = %v, want *ProfileSyntaxError", tt.in, err)
			continue
		}
		if se.Pos != tt.pos || se.Input != tt.in || se.Reason == "" {
			t.Errorf("ParseProfile(%q): %v (pos %d), want pos %d", tt.in, err, se.Pos, tt.pos)
		}
	}
}

func TestProfileHelpers(t *testing.T) {
	p := MustParseProfile("1c.3g.20gb")
	if !p.IsComputeInstance() || p.ComputeSlices() != 1 || p.GPUInstance().String() != "3g.20gb" {
		t.Errorf("1c.3g.20gb helpers wrong: %+v", p)
	}
	if MustParseProfile("1c.1g.5gb").IsComputeInstance() {
		t.Error("1c.1g.5gb is a whole GPU instance")
	}
	if !MustParseProfile("1c.1g.5gb").Equal(MustParseProfile("1g.5gb")) {
		t.Error("1c.1g.5gb != 1g.5gb")
	}
	if !MustParseProfile("2g.48gb+me,gfx").Equal(MustParseProfile("2g.48gb+gfx,me")) {
		t.Error("attribute order matters")
	}
	if MustParseProfile("1g.5gb+me").Equal(MustParseProfile("1g.5gb-me")) {
		t.Error("+me == -me")
	}
	for in, want := range map[string]mediaClass{"1g.5gb": mediaPlain, "1g.5gb+me": mediaME, "1g.24gb+me.all": mediaAllME, "1g.24gb-me": mediaNoME, "1g.24gb+gfx": mediaPlain} {
		if got := MustParseProfile(in).mediaClass(); got != want {
			t.Errorf("%s media class %d, want %d", in, got, want)
		}
	}
}

func FuzzParseProfile(f *testing.F) {
	for _, s := range []string{"1g.5gb", "1c.2g.10gb", "1g.10gb+me", "1g.5gb-me", "1g.24gb+me.all", "1g.24gb+gfx", "2g.48gb+gfx,me", "1g.5gb+", "01g.5gb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseProfile(s)
		if err != nil {
			var se *ProfileSyntaxError
			if !errors.As(err, &se) || se.Pos < 0 || se.Pos > len(s) {
				t.Fatalf("ParseProfile(%q): bad error %v", s, err)
			}
			return
		}
		if p.String() != s {
			t.Fatalf("ParseProfile(%q).String() = %q", s, p.String())
		}
		q, err := ParseProfile(p.Canonical().String())
		if err != nil || !q.Equal(p) {
			t.Fatalf("canonical form of %q does not reparse equal: %v", s, err)
		}
	})
}
