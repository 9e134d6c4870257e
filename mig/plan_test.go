package mig

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlanExamples(t *testing.T) {
	m := mustLookup(t, "A100-SXM4-40GB")
	tests := []struct {
		current  []Instance
		requests []string
		want     []Instance
	}{
		// A lone 1g goes to slice 6: slices 0-3 stay free for 4g/3g and 4-5 for a 2g.
		{nil, []string{"1g.5gb"}, []Instance{At("1g.5gb", 6)}},
		// Beside a 3g at 0, a 2g goes to 4 (not 6, which only 1g.10gb could use... and 2g cannot).
		{[]Instance{At("3g.20gb", 0)}, []string{"2g.10gb"}, []Instance{At("2g.10gb", 4)}},
		// The balanced layout fits completely.
		{nil, []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, nil},
	}
	for _, tt := range tests {
		got, err := Plan(m, tt.current, tt.requests)
		if err != nil {
			t.Errorf("Plan(%v, %v): %v", tt.current, tt.requests, err)
			continue
		}
		for i := range got {
			got[i].Placement.Size = 0
		}
		if tt.want != nil {
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Plan(%v) (-want +got):\n%s", tt.requests, diff)
			}
		}
	}
	_, err := Plan(m, []Instance{At("1g.5gb", 0), At("1g.5gb", 4)}, []string{"4g.20gb"})
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Kind != ConflictNoFit {
		t.Errorf("Plan 4g beside 1g@0: %v", err)
	}
	if _, err := Plan(m, []Instance{{Profile: "1g.5gb"}}, []string{"1g.5gb"}); err == nil {
		t.Error("Plan accepted an unplaced current instance")
	}
}

// bruteScore is the planner's documented objective, computed independently: for each placement
// size, largest first, the number of (profile, placement) pairs that fit in the free slices.
func bruteScore(m *Model, layout []Instance) []int {
	used := make([]bool, m.MemorySlices)
	for _, in := range layout {
		for s := in.Placement.Start; s < in.Placement.End(); s++ {
			used[s] = true
		}
	}
	var sizes []int
	for _, p := range m.Profiles {
		if !slices.Contains(sizes, p.Placements[0].Size) {
			sizes = append(sizes, p.Placements[0].Size)
		}
	}
	slices.Sort(sizes)
	slices.Reverse(sizes)
	score := make([]int, len(sizes))
	for _, p := range m.Profiles {
		for _, pl := range p.Placements {
			free := true
			for s := pl.Start; s < pl.End(); s++ {
				free = free && !used[s]
			}
			if free {
				score[slices.Index(sizes, pl.Size)]++
			}
		}
	}
	return score
}

// TestPlanAgainstBruteForce: on every catalog model, for random current layouts and requests, the
// planner succeeds exactly when some assignment is valid, and its choice has the best score.
func TestPlanAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range Models() {
		layouts, err := Layouts(m)
		if err != nil {
			t.Fatal(err)
		}
		layouts = append(layouts, nil) // the empty GPU
		for trial := 0; trial < 150; trial++ {
			current := layouts[rng.IntN(len(layouts))]
			var requests []string
			for n := 1 + rng.IntN(3); n > 0; n-- {
				requests = append(requests, m.Profiles[rng.IntN(len(m.Profiles))].Name)
			}
			// Brute force: every combination of allowed placements.
			var best []int
			var rec func(k int, acc []Instance)
			rec = func(k int, acc []Instance) {
				if k == len(requests) {
					if _, err := Validate(m, acc); err == nil {
						if s := bruteScore(m, acc); best == nil || slices.Compare(s, best) > 0 {
							best = s
						}
					}
					return
				}
				p, _ := m.Profile(requests[k])
				for _, pl := range p.Placements {
					pl := pl
					rec(k+1, append(slices.Clone(acc), Instance{Profile: p.Name, Placement: &pl}))
				}
			}
			rec(0, slices.Clone(current))

			got, err := Plan(m, current, requests)
			if (err == nil) != (best != nil) {
				t.Fatalf("%s current %s requests %v: plan err %v, brute force feasible %v", m.Name, FormatLayout(current), requests, err, best != nil)
			}
			if err != nil {
				continue
			}
			full := append(slices.Clone(current), got...)
			if _, err := Validate(m, full); err != nil {
				t.Fatalf("%s: plan result %s invalid: %v", m.Name, FormatLayout(full), err)
			}
			if s := bruteScore(m, full); !slices.Equal(s, best) {
				t.Fatalf("%s current %s requests %v: plan %s scores %v, best %v", m.Name, FormatLayout(current), requests, FormatLayout(got), s, best)
			}
		}
	}
}

// TestPlacementOrder checks the first-fit order against hand-computed A100-40GB and RTX PRO 6000
// geometry: on an empty A100 a 1g goes where it costs no 3g/4g room (slice 6), then 4 and 5
// (each costs the upper 3g and a 2g; ties go to the lower start, as Plan breaks them), then
// 0..3; a 2g prefers 4; beside a 1g at 6 the next 1g goes to 4. On an RTX PRO 6000 all four 1g
// placements cost the same (one 2g placement each), so the lowest start comes first.
func TestPlacementOrder(t *testing.T) {
	a100 := mustLookup(t, "A100-SXM4-40GB")
	rtx := mustLookup(t, "RTX PRO 6000 Blackwell")
	starts := func(ps []Placement) []int {
		var out []int
		for _, p := range ps {
			out = append(out, p.Start)
		}
		return out
	}
	for _, tt := range []struct {
		m       *Model
		current []Instance
		profile string
		want    []int
	}{
		{a100, nil, "1g.5gb", []int{6, 4, 5, 0, 1, 2, 3}},
		{a100, nil, "2g.10gb", []int{4, 0, 2}},
		{a100, nil, "3g.20gb", []int{4, 0}},
		{a100, []Instance{At("1g.5gb", 6)}, "1g.5gb", []int{4, 5, 0, 1, 2, 3, 6}},
		{a100, []Instance{At("1g.5gb+me", 6)}, "1g.5gb+me", []int{6, 4, 5, 0, 1, 2, 3}}, // none fits: the empty-GPU order
		{a100, []Instance{At("3g.20gb", 4)}, "4g.20gb", []int{0}},
		{rtx, nil, "1g.24gb", []int{0, 3, 6, 9}},
		{rtx, []Instance{At("2g.48gb", 0)}, "1g.24gb-me", []int{6, 9, 0, 3}},
	} {
		for i := range tt.current {
			p, _ := tt.m.Profile(tt.current[i].Profile)
			tt.current[i].Placement.Size = p.MemorySlices()
		}
		got, err := PlacementOrder(tt.m, tt.current, tt.profile)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, starts(got)); diff != "" {
			t.Errorf("%s beside %s: %s order (-want +got):\n%s", tt.m.Name, FormatLayout(tt.current), tt.profile, diff)
		}
	}
}

// TestPlacementCost: on an empty A100-40GB the capacity per size (8, 4, 2, 1 slices) is 1 (7g),
// 3 (3g at 0 and 4, 4g at 0), 7 (1g.10gb at 0,2,4,6 and 2g at 0,2,4) and 14 (1g and 1g+me at
// 0..6); a 1g.5gb at 6 leaves 0, 2, 6 and 12, so it costs 1, 1, 1, 2.
func TestPlacementCost(t *testing.T) {
	a100 := mustLookup(t, "A100-SXM4-40GB")
	cost, fits, err := PlacementCost(a100, nil, "1g.5gb", Placement{Start: 6, Size: 1})
	if err != nil || !fits || !slices.Equal(cost, []int{1, 1, 1, 2}) {
		t.Errorf("PlacementCost(1g.5gb@6) = %v, %v, %v; want [1 1 1 2], true", cost, fits, err)
	}
	full := []Instance{{Profile: "7g.40gb", Placement: &Placement{Start: 0, Size: 8}}}
	if _, fits, err := PlacementCost(a100, full, "1g.5gb", Placement{Start: 6, Size: 1}); err != nil || fits {
		t.Errorf("1g.5gb beside a 7g.40gb fits: %v, %v", fits, err)
	}
	cands, err := Candidates(a100, full, "2g.10gb", "3g.20gb")
	if err != nil || len(cands) != 5 {
		t.Fatalf("Candidates(2g, 3g) = %d, %v; want 5", len(cands), err)
	}
	for _, c := range cands {
		if c.Fits {
			t.Errorf("candidate %s@%d fits beside a 7g.40gb", c.Profile, c.Placement.Start)
		}
	}
	for _, bad := range []func() error{
		func() error { _, _, err := PlacementCost(nil, nil, "1g.5gb", Placement{}); return err },
		func() error { _, _, err := PlacementCost(a100, nil, "9g.1gb", Placement{}); return err },
		func() error {
			_, _, err := PlacementCost(a100, nil, "1g.5gb", Placement{Start: 7, Size: 1})
			return err
		},
		func() error { _, err := PlacementOrder(a100, []Instance{{Profile: "1g.5gb"}}, "1g.5gb"); return err },
		func() error { _, err := Candidates(a100, append(slices.Clone(full), full...)); return err },
		func() error { _, err := PlacementOrder(nil, nil, "1g.5gb"); return err },
	} {
		if bad() == nil {
			t.Error("an invalid argument was accepted")
		}
	}
}
