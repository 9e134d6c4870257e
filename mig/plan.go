package mig

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// capacity counts, for a set of free memory slices, how many (profile, placement) pairs of the model
// still fit, grouped by placement size from the largest down. A larger vector (compared
// lexicographically) means larger free regions are kept: this is the planner's fragmentation score.
func (g *geometry) capacity(free uint64) []int {
	if g.sizes == nil {
		g.sizes = g.sizeClasses()
		g.sizeOf = make([]int, len(g.profiles))
		for pi, p := range g.profiles {
			g.sizeOf[pi] = slices.Index(g.sizes, p.MemorySlices())
		}
	}
	out := make([]int, len(g.sizes))
	for pi, ms := range g.masks {
		k := g.sizeOf[pi]
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
	if m == nil {
		return nil, errNilModel("Plan")
	}
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

// Candidate is one placement of one profile with what placing an instance there now would cost
// (see PlacementCost).
type Candidate struct {
	// Profile is the GPU-instance profile name.
	Profile string
	// Placement is where the instance would go.
	Placement Placement
	// Fits is false when NVML would refuse the instance there beside the current instances.
	Fits bool
	// Cost is the capacity lost, per placement size, largest first (see PlacementCost).
	Cost []int
}

// Candidates returns every placement of the given profiles of m (all profiles when none is
// given; a name m does not have is an error), in catalog order, with its PlacementCost beside the current instances. It resolves the
// layout once, so it is the cheap way to rank a whole GPU; a Ranker is cheaper still for many
// layouts of one model.
func Candidates(m *Model, current []Instance, profiles ...string) ([]Candidate, error) {
	r, err := NewRanker(m)
	if err != nil {
		return nil, err
	}
	return r.Candidates(current, profiles...)
}

// Ranker computes Candidates for many layouts of one model, preparing the model once. It must
// not be used concurrently, and the model must not change while it is in use.
type Ranker struct {
	g *geometry
}

// NewRanker prepares m for ranking placements.
func NewRanker(m *Model) (*Ranker, error) {
	if m == nil {
		return nil, fmt.Errorf("placement candidates: nil model")
	}
	return &Ranker{g: newGeometry(m)}, nil
}

// Candidates is the package-level Candidates for the Ranker's model.
func (r *Ranker) Candidates(current []Instance, profiles ...string) ([]Candidate, error) {
	g := r.g
	st, err := g.state(current)
	if err != nil {
		return nil, fmt.Errorf("placement candidates on %s: %w", g.m.Name, err)
	}
	for _, name := range profiles {
		if _, ok := g.m.Profile(name); !ok {
			// A name the model lacks used to yield no candidates, as if every placement were taken.
			return nil, fmt.Errorf("placement candidates on %s: unknown profile %q (profiles: %s)", g.m.Name, name, strings.Join(g.m.ProfileNames(), ", "))
		}
	}
	var out []Candidate
	for pi, p := range g.profiles {
		if len(profiles) > 0 && !slices.Contains(profiles, p.Name) {
			continue
		}
		for j, pl := range p.Placements {
			c, fits := g.cost(st, pi, j)
			out = append(out, Candidate{Profile: p.Name, Placement: pl, Fits: fits, Cost: c})
		}
	}
	return out, nil
}

// PlacementCost says what placing an instance of profile at pl beside the current instances
// costs in future capacity: for each placement size of the model, largest first, how many
// (profile, placement) pairs that fit now no longer fit afterwards. Lexicographically smaller is
// better; it is the quantity Plan maximises the complement of, so a first-fit allocator offered
// placements in ascending cost (across GPUs too) places as Plan would. fits is false when NVML
// would refuse the instance there (overlap, instance count, media engines); the cost is then the
// cost on an empty GPU. current must be placed instances of m; an invalid layout is an error.
func PlacementCost(m *Model, current []Instance, profile string, pl Placement) (cost []int, fits bool, err error) {
	if m == nil {
		return nil, false, fmt.Errorf("placement cost: nil model")
	}
	g := newGeometry(m)
	st, err := g.state(current)
	if err != nil {
		return nil, false, fmt.Errorf("placement cost of %s on %s: %w", profile, m.Name, err)
	}
	pi := g.profileIndex(profile)
	if pi < 0 {
		return nil, false, fmt.Errorf("placement cost on %s: unknown profile %q (profiles: %v)", m.Name, profile, m.ProfileNames())
	}
	j := slices.Index(g.profiles[pi].Placements, pl)
	if j < 0 {
		return nil, false, fmt.Errorf("placement cost on %s: %s does not allow placement %d:%d (allowed: %s)", m.Name, profile, pl.Start, pl.Size,
			formatPlacements(g.profiles[pi].Placements))
	}
	cost, fits = g.cost(st, pi, j)
	return cost, fits, nil
}

// placedState is a placed layout resolved for quick "does one more instance fit" checks.
type placedState struct {
	occupied uint64
	counts   []int // instances per profile index
	media    [4]int
	compute  int
}

// state resolves a placed layout. It is an error when the layout itself is invalid or has an
// unplaced instance.
func (g *geometry) state(current []Instance) (*placedState, error) {
	items, err := g.resolve(current)
	if err != nil {
		return nil, fmt.Errorf("current layout: %w", err)
	}
	st := &placedState{counts: make([]int, len(g.profiles))}
	for i, it := range items {
		if it.placement < 0 {
			return nil, fmt.Errorf("current instance #%d %s has no placement", i, current[i].Profile)
		}
		st.occupied |= g.masks[it.prof][it.placement]
		st.counts[it.prof]++
		st.media[g.parsed[it.prof].mediaClass()]++
		st.compute += g.profiles[it.prof].ComputeSlices
	}
	return st, nil
}

// fits reports whether one more instance of profile pi at placement j is allowed beside st: the
// same rules as resolve (overlap, counts, media engines, compute slices).
func (g *geometry) fits(st *placedState, pi, j int) bool {
	p := g.profiles[pi]
	if g.masks[pi][j]&st.occupied != 0 || st.counts[pi]+1 > p.InstanceCount {
		return false
	}
	if g.m.ComputeSlices > 0 && st.compute+p.ComputeSlices > g.m.ComputeSlices {
		return false
	}
	media := st.media
	media[g.parsed[pi].mediaClass()]++
	me, all, plain := media[mediaME], media[mediaAllME], media[mediaPlain]
	return me <= 1 && all <= 1 && (all == 0 || me+plain == 0)
}

// cost is PlacementCost for placement j of profile pi.
func (g *geometry) cost(st *placedState, pi, j int) ([]int, bool) {
	mk := g.masks[pi][j]
	fits := g.fits(st, pi, j)
	occupied := st.occupied
	if !fits {
		occupied = 0
	}
	before, after := g.capacity(g.full&^occupied), g.capacity(g.full&^(occupied|mk))
	for k := range before {
		before[k] -= after[k]
	}
	return before, fits
}

// PlacementOrder returns every placement of profile on m, ordered for a first-fit allocator that
// should choose as Plan does. First come the placements where an instance of profile fits beside
// current (no overlap, instance counts and media-engine rules hold), best first by Plan's
// least-fragmentation score (the most (profile, placement) pairs of the largest sizes still free
// afterwards; ties: the lower start first, as Plan breaks them); then the placements where it does not fit now,
// ordered the same way as on an empty GPU. current must be placed instances of m (as read from
// NVML); an invalid current layout is an error naming the conflict.
func PlacementOrder(m *Model, current []Instance, profile string) ([]Placement, error) {
	if m == nil {
		return nil, fmt.Errorf("placement order: nil model")
	}
	g := newGeometry(m)
	pi := g.profileIndex(profile)
	if pi < 0 {
		return nil, fmt.Errorf("placement order on %s: unknown profile %q (profiles: %v)", m.Name, profile, m.ProfileNames())
	}
	st, err := g.state(current)
	if err != nil {
		return nil, fmt.Errorf("placement order of %s on %s: %w", profile, m.Name, err)
	}
	p := g.profiles[pi]
	out := make([]Candidate, len(p.Placements))
	for j, pl := range p.Placements {
		c, fits := g.cost(st, pi, j)
		out[j] = Candidate{Profile: profile, Placement: pl, Fits: fits, Cost: c}
	}
	slices.SortStableFunc(out, Candidate.Compare)
	pls := make([]Placement, len(out))
	for i, c := range out {
		pls[i] = c.Placement
	}
	return pls, nil
}

// Compare orders two candidate placements as PlacementOrder does: those that fit first, then
// the lower PlacementCost, then the lower start (Plan's tie-break). It returns -1 when a comes
// first.
func (a Candidate) Compare(b Candidate) int {
	if a.Fits != b.Fits {
		if a.Fits {
			return -1
		}
		return 1
	}
	if c := slices.Compare(a.Cost, b.Cost); c != 0 {
		return c
	}
	return cmp.Compare(a.Placement.Start, b.Placement.Start)
}
