package mig_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/mig"
)

// TestDisambiguateProfileNames (issue 28, defect 4): GPU-instance profiles with one name but
// different Ids all get "+id<Id>" (after any other attribute), whatever their order; the
// ambiguous name then finds none of them, and each its own.
func TestDisambiguateProfileNames(t *testing.T) {
	for _, tc := range []struct {
		name          string
		in            []mig.GIProfile
		want          []string
		wantAmbiguous []string
	}{
		{"unique names stay", []mig.GIProfile{{ID: 19, Name: "1g.10gb"}, {ID: 15, Name: "1g.20gb"}},
			[]string{"1g.10gb", "1g.20gb"}, nil},
		{"two alike", []mig.GIProfile{{ID: 19, Name: "1g.10gb"}, {ID: 15, Name: "1g.10gb"}, {ID: 0, Name: "7g.80gb"}},
			[]string{"1g.10gb+id19", "1g.10gb+id15", "7g.80gb"}, []string{"1g.10gb"}},
		{"with attributes", []mig.GIProfile{{ID: 20, Name: "1g.10gb+me"}, {ID: 21, Name: "1g.10gb+me"}, {ID: 22, Name: "1g.10gb-me"}, {ID: 23, Name: "1g.10gb-me"}},
			[]string{"1g.10gb+me,id20", "1g.10gb+me,id21", "1g.10gb-me,id22", "1g.10gb-me,id23"}, []string{"1g.10gb+me", "1g.10gb-me"}},
		{"same Id twice is one profile", []mig.GIProfile{{ID: 19, Name: "1g.10gb"}, {ID: 19, Name: "1g.10gb"}},
			[]string{"1g.10gb", "1g.10gb"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, reversed := range []bool{false, true} {
				in := slices.Clone(tc.in)
				want := slices.Clone(tc.want)
				if reversed {
					slices.Reverse(in)
					slices.Reverse(want)
				}
				ambiguous := mig.DisambiguateProfileNames(in)
				var got []string
				for _, p := range in {
					got = append(got, p.Name)
					if _, err := mig.ParseProfile(p.Name); err != nil {
						t.Errorf("%s: %v", p.Name, err)
					}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("names (reversed %t) (-want +got):\n%s", reversed, diff)
				}
				if diff := cmp.Diff(tc.wantAmbiguous, ambiguous); diff != "" {
					t.Errorf("ambiguous names (-want +got):\n%s", diff)
				}
				m := &mig.Model{Profiles: in}
				for _, a := range ambiguous {
					if p, ok := m.Profile(a); ok {
						t.Errorf("Model.Profile(%q) = Id %d, want none: the name is ambiguous", a, p.ID)
					}
				}
				for _, p := range in {
					if got, ok := m.Profile(p.Name); !ok || got.ID != p.ID {
						t.Errorf("Model.Profile(%q) = %v, want Id %d", p.Name, got, p.ID)
					}
				}
			}
		})
	}
}
