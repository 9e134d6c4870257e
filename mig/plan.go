package mig

import (
	"cmp"
	"fmt"
	"slices"
)

// capacity counts, for a set of free memory slices, how many (profile, placement) pairs of the model
// still fit, grouped by placement size from the largest down. A larger vector (compared
// lexicographically) means larger free regions are kept: this is the planner's fragmentation score.
func (g *geometry) capacity(free uint64) []int {
	sizes := g.sizeClasses()
	out := make([]int, len(sizes))
	for pi, ms := range g.masks {
		size := g.profiles[pi].MemorySlices()
		k := slices.Index(sizes, size)
		for _, mk := range ms {
			if mk&free == mk {
				out[k]++
			}
		}
	}
	return out
}

// sizeClasses returns the distinct placement sizes of the model, largest first.
func (g *geometry) sizeClasses() []int {
	var sizes []int
	for _, p := range g.profiles {
		if s := p.MemorySlices(); !slices.Contains(sizes, s) {
			sizes = append(sizes, s)
		}
	}
	slices.SortFunc(sizes, func(a, b int) int { return cmp.Compare(b, a) })
	return sizes
}

// solve assigns placements to the unplaced items given the occupied slices, choosing among all
// assignments the one with the best capacity score (ties: the first in order of ascending placement
// indexes). It returns the placement index per item, in the items' order.
func (g *geometry) solve(occupied uint64, free []item) ([]int, bool) {
	// Search order: largest instances first, then by profile, so that equal profiles are adjacent
	// and can be kept in ascending placement order (symmetry breaking).
	order := make([]int, len(free))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := free[a].prof, free[b].prof
		if c := cmp.Compare(g.profiles[pb].MemorySlices(), g.profiles[pa].MemorySlices()); c != 0 {
			return c
		}
		return cmp.Compare(pa, pb)
	})
	cur := make([]int, len(free))
	var best []int
	var bestScore []int
	var rec func(k int, used uint64)
	rec = func(k int, used uint64) {
		if k == len(order) {
			score := g.capacity(g.full &^ used)
			if best == nil || slices.Compare(score, bestScore) > 0 {
				best = slices.Clone(cur)
				bestScore = score
			}
			return
		}
		it := free[order[k]]
		from := 0
		if k > 0 && free[order[k-1]].prof == it.prof {
			from = cur[order[k-1]] + 1
		}
		for j := from; j < len(g.masks[it.prof]); j++ {
			mk := g.masks[it.prof][j]
			if mk&used != 0 {
				continue
			}
			cur[order[k]] = j
			rec(k+1, used|mk)
		}
	}
	rec(0, occupied)
	return best, best != nil
}

// Plan places requested GPU-instance profiles on a GPU that already has the current instances
// (which must all have placements, as read from NVML). It returns one placed Instance per request,
// in request order, choosing among all assignments that fit the one that keeps the largest free
// regions: after placing, it counts for every size class, largest first, how many (profile,
// placement) pairs of the model still fit, and maximises that vector lexicographically. On an empty
// A100 a single 1g.5gb therefore goes to slice 6, leaving 0–3 for a 4g/3g and 4–5 for a 2g.
//
// The error is a *ValidationError (possibly several joined) when the request cannot be met: unknown
// profiles, instance counts, media-engine rules, or no placement that fits (ConflictNoFit).
func Plan(m *Model, current []Instance, requests []string) ([]Instance, error) {
	layout := make([]Instance, 0, len(current)+len(requests))
	for i, in := range current {
		if in.Placement == nil {
			return nil, fmt.Errorf("plan on %s: current instance #%d %s has no placement", m.Name, i, in.Profile)
		}
		layout = append(layout, in)
	}
	for _, r := range requests {
		layout = append(layout, Instance{Profile: r})
	}
	placed, err := Validate(m, layout)
	if err != nil {
		return nil, fmt.Errorf("plan %v: %w", requests, err)
	}
	return placed[len(current):], nil
}
