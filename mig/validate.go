package mig

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Instance is one GPU instance of a layout: a GPU-instance profile name and, optionally, where it
// sits.
type Instance struct {
	// Profile is the GPU-instance profile name, e.g. "3g.20gb".
	Profile string `json:"profile"`
	// Placement is where the instance sits, or nil for "anywhere it fits". A Size of 0 means the
	// profile's size (as written by "@start" in ParseLayout).
	Placement *Placement `json:"placement,omitempty"`
}

// At returns an Instance of profile placed at the given start memory slice (size from the profile).
func At(profile string, start int) Instance {
	return Instance{Profile: profile, Placement: &Placement{Start: start}}
}

// String formats the instance as "3g.20gb" or "3g.20gb@4".
func (in Instance) String() string {
	if in.Placement == nil {
		return in.Profile
	}
	return in.Profile + "@" + strconv.Itoa(in.Placement.Start)
}

// ParseLayout parses a textual layout: comma-separated profile names, repeats allowed, each with an
// optional "@start" memory-slice placement, e.g. "3g.20gb,2g.10gb@4,1g.5gb,1g.5gb". Spaces around
// entries are ignored. Because profile names start with a digit and attributes with a letter, a
// multi-attribute suffix such as "2g.48gb+gfx,me" is kept together.
func ParseLayout(s string) ([]Instance, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty layout: want comma-separated profiles such as 3g.20gb,2g.10gb@4")
	}
	var tokens []string
	for _, tok := range strings.Split(s, ",") {
		t := strings.TrimSpace(tok)
		if len(tokens) > 0 && t != "" && !isDigit(t[0]) {
			tokens[len(tokens)-1] += "," + t // attribute continuation
			continue
		}
		tokens = append(tokens, t)
	}
	out := make([]Instance, 0, len(tokens))
	for i, t := range tokens {
		if t == "" {
			return nil, fmt.Errorf("layout entry %d is empty", i+1)
		}
		name, start, placed := strings.Cut(t, "@")
		in := Instance{Profile: name}
		if _, err := ParseProfile(name); err != nil {
			return nil, fmt.Errorf("layout entry %d: %w", i+1, err)
		}
		if placed {
			n, err := strconv.Atoi(start)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("layout entry %d %q: placement %q is not a memory-slice index (a non-negative integer)", i+1, t, start)
			}
			in.Placement = &Placement{Start: n}
		}
		out = append(out, in)
	}
	return out, nil
}

// FormatLayout formats a layout the way ParseLayout reads it.
func FormatLayout(layout []Instance) string {
	parts := make([]string, len(layout))
	for i, in := range layout {
		parts[i] = in.String()
	}
	return strings.Join(parts, ",")
}

// ConflictKind classifies a ValidationError.
type ConflictKind string

// The kinds of layout errors.
const (
	// ConflictUnknownProfile: the model has no such GPU-instance profile.
	ConflictUnknownProfile ConflictKind = "unknown-profile"
	// ConflictPlacement: the placement is not one the profile allows.
	ConflictPlacement ConflictKind = "placement"
	// ConflictOverlap: two placed instances share memory slices.
	ConflictOverlap ConflictKind = "overlap"
	// ConflictCount: more instances of a profile than its instance count.
	ConflictCount ConflictKind = "count"
	// ConflictMedia: media-engine exclusivity ("+me" at most once; "+me.all" only with "-me").
	ConflictMedia ConflictKind = "media"
	// ConflictComputeSlices: more compute slices than the GPU has.
	ConflictComputeSlices ConflictKind = "compute-slices"
	// ConflictNoFit: every instance is allowed, but no assignment of placements fits them all.
	ConflictNoFit ConflictKind = "no-fit"
)

// ValidationError is one reason a layout is invalid on a model. Validate may join several with
// errors.Join; errors.As finds the first.
type ValidationError struct {
	// Model is the model's canonical name.
	Model string
	// Kind says what is wrong.
	Kind ConflictKind
	// Instances are the indexes (into the layout given to Validate) of the instances in conflict.
	Instances []int
	// Profiles are the profile names of those instances, in the same order.
	Profiles []string
	// Slices are the memory slices in conflict (overlap) or the free ones (no-fit), when relevant.
	Slices []int
	// Allowed says what would be allowed: placements, the instance count, or the known profiles.
	Allowed string
	msg     string
}

// Error implements error.
func (e *ValidationError) Error() string {
	s := e.Model + ": " + e.msg
	if e.Allowed != "" {
		s += " (allowed: " + e.Allowed + ")"
	}
	return s
}

// geometry is a model prepared for fast checks: per profile, its placements as slice bitmasks.
type geometry struct {
	m        *Model
	profiles []*GIProfile
	parsed   []Profile
	masks    [][]uint64 // per profile, per placement
	full     uint64
	sizes    []int // placement sizes, largest first (capacity's classes), computed on first use
	sizeOf   []int // per profile, its index in sizes
}

func newGeometry(m *Model) *geometry {
	g := &geometry{m: m, full: (uint64(1) << uint(m.MemorySlices)) - 1}
	for i := range m.Profiles {
		p := &m.Profiles[i]
		g.profiles = append(g.profiles, p)
		pp, _ := ParseProfile(p.Name)
		g.parsed = append(g.parsed, pp)
		ms := make([]uint64, len(p.Placements))
		for j, pl := range p.Placements {
			ms[j] = placementMask(pl)
		}
		g.masks = append(g.masks, ms)
	}
	return g
}

func placementMask(p Placement) uint64 {
	if p.Size <= 0 || p.Start < 0 || p.End() > 64 {
		return 0
	}
	return ((uint64(1) << uint(p.Size)) - 1) << uint(p.Start)
}

// maskSlices lists the slice indexes set in a mask.
func maskSlices(m uint64) []int {
	var out []int
	for m != 0 {
		i := bits.TrailingZeros64(m)
		out = append(out, i)
		m &^= 1 << uint(i)
	}
	return out
}

// profileIndex resolves a name to the model's profile index.
func (g *geometry) profileIndex(name string) int {
	for i, p := range g.profiles {
		if p.Name == name {
			return i
		}
	}
	if p, ok := g.m.Profile(name); ok {
		for i, q := range g.profiles {
			if q == p {
				return i
			}
		}
	}
	return -1
}

// item is one instance of a layout resolved against a geometry.
type item struct {
	idx       int // index in the caller's layout
	prof      int // profile index
	placement int // placement index, -1 when unplaced
}

func (g *geometry) describe(it item) string {
	s := fmt.Sprintf("#%d %s", it.idx, g.profiles[it.prof].Name)
	if it.placement >= 0 {
		s += "@" + strconv.Itoa(g.profiles[it.prof].Placements[it.placement].Start)
	}
	return s
}

func allowedPlacements(p *GIProfile) string {
	return p.Name + " at " + formatPlacements(p.Placements)
}

// resolve checks the layout statically: known profiles, allowed placements, counts, media rules,
// compute slices and overlaps among placed instances. It returns the items and the joined errors.
func (g *geometry) resolve(layout []Instance) ([]item, error) {
	r := &resolver{g: g, layout: layout}
	items := make([]item, 0, len(layout))
	for i, in := range layout {
		if it, ok := r.item(i, in); ok {
			items = append(items, it)
		}
	}
	r.checkCounts(items)
	r.checkMedia(items)
	r.checkComputeSlices(items)
	r.checkOverlaps(items)
	return items, errors.Join(r.errs...)
}

// resolver collects the validation errors of one layout on a geometry.
type resolver struct {
	g      *geometry
	layout []Instance
	errs   []error
}

// fail records a conflict among the layout's instances idx.
func (r *resolver) fail(kind ConflictKind, idx []int, slices []int, allowed, format string, args ...any) {
	e := &ValidationError{Model: r.g.m.Name, Kind: kind, Instances: idx, Slices: slices, Allowed: allowed, msg: fmt.Sprintf(format, args...)}
	for _, i := range idx {
		e.Profiles = append(e.Profiles, r.layout[i].Profile)
	}
	r.errs = append(r.errs, e)
}

// item resolves instance #i to its profile and placement; false when it names no GPU-instance
// profile of the model or a placement the profile does not allow.
func (r *resolver) item(i int, in Instance) (item, bool) {
	g := r.g
	if p, err := ParseProfile(in.Profile); err == nil && p.IsComputeInstance() {
		r.fail(ConflictUnknownProfile, []int{i}, nil, "", "instance #%d: %q is a compute-instance profile; a layout lists GPU-instance profiles such as %q", i, in.Profile, p.GPUInstance().String())
		return item{}, false
	}
	pi := g.profileIndex(in.Profile)
	if pi < 0 {
		r.fail(ConflictUnknownProfile, []int{i}, nil, strings.Join(g.m.ProfileNames(), ", "), "instance #%d: unknown profile %q", i, in.Profile)
		return item{}, false
	}
	it := item{idx: i, prof: pi, placement: -1}
	if in.Placement == nil {
		return it, true
	}
	p := g.profiles[pi]
	want := Placement{Start: in.Placement.Start, Size: in.Placement.Size}
	if want.Size == 0 {
		want.Size = p.MemorySlices()
	}
	for j, pl := range p.Placements {
		if pl == want {
			it.placement = j
		}
	}
	if it.placement < 0 {
		r.fail(ConflictPlacement, []int{i}, nil, allowedPlacements(p), "instance #%d %s: placement %d:%d is not allowed", i, p.Name, want.Start, want.Size)
		return item{}, false
	}
	return it, true
}

// checkCounts fails a profile with more instances than it allows.
func (r *resolver) checkCounts(items []item) {
	counts := make([]int, len(r.g.profiles))
	for _, it := range items {
		counts[it.prof]++
	}
	for pi, c := range counts {
		if p := r.g.profiles[pi]; c > p.InstanceCount {
			var idx []int
			for _, it := range items {
				if it.prof == pi {
					idx = append(idx, it.idx)
				}
			}
			r.fail(ConflictCount, idx, nil, fmt.Sprintf("at most %d", p.InstanceCount), "%d instances of %s", c, p.Name)
		}
	}
}

// checkMedia enforces media-engine exclusivity: one +me instance, one +me.all instance and only
// -me instances beside it.
func (r *resolver) checkMedia(items []item) {
	var me, all, other []int
	for _, it := range items {
		switch r.g.parsed[it.prof].mediaClass() {
		case mediaME:
			me = append(me, it.idx)
		case mediaAllME:
			all = append(all, it.idx)
		case mediaPlain:
			other = append(other, it.idx)
		}
	}
	if len(me) > 1 {
		r.fail(ConflictMedia, me, nil, "one +me instance per GPU", "%d instances with media extensions (+me) share the GPU's single set of JPEG/OFA engines", len(me))
	}
	if len(all) > 1 {
		r.fail(ConflictMedia, all, nil, "one +me.all instance per GPU", "%d instances take all media engines (+me.all)", len(all))
	}
	if len(all) > 0 && len(me)+len(other) > 0 {
		r.fail(ConflictMedia, append(append(append([]int{}, all...), me...), other...), nil, "only -me profiles beside a +me.all instance",
			"a +me.all instance takes every media engine, so only -me instances may share the GPU")
	}
}

// checkComputeSlices fails a layout that needs more compute slices than the GPU has.
func (r *resolver) checkComputeSlices(items []item) {
	total := 0
	for _, it := range items {
		total += r.g.profiles[it.prof].ComputeSlices
	}
	if r.g.m.ComputeSlices > 0 && total > r.g.m.ComputeSlices {
		idx := make([]int, len(items))
		for i, it := range items {
			idx[i] = it.idx
		}
		r.fail(ConflictComputeSlices, idx, nil, fmt.Sprintf("%d compute slices", r.g.m.ComputeSlices), "the instances need %d compute slices", total)
	}
}

// checkOverlaps fails every pair of placed instances that share memory slices.
func (r *resolver) checkOverlaps(items []item) {
	g := r.g
	for a := 0; a < len(items); a++ {
		if items[a].placement < 0 {
			continue
		}
		ma := g.masks[items[a].prof][items[a].placement]
		for b := a + 1; b < len(items); b++ {
			if items[b].placement < 0 {
				continue
			}
			if ov := ma & g.masks[items[b].prof][items[b].placement]; ov != 0 {
				r.fail(ConflictOverlap, []int{items[a].idx, items[b].idx}, maskSlices(ov), "",
					"instance %s overlaps instance %s on memory slices %s", g.describe(items[a]), g.describe(items[b]), joinInts(maskSlices(ov)))
			}
		}
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// Validate checks a layout of GPU instances on a model: every profile exists, every given placement
// is allowed, placed instances do not share memory slices, no profile exceeds its instance count,
// media-engine exclusivity holds ("+me" at most once per GPU; "+me.all" at most once and only beside
// "-me" instances) and the compute slices suffice. Instances without a placement are assigned one;
// the layout is valid if some assignment fits, and the assignment chosen is the one that keeps the
// largest free regions (see Plan). The result has the layout's instances in order, all placed.
//
// Errors are *ValidationError values (several joined with errors.Join when the layout has several
// problems) naming the instances, profiles and memory slices in conflict and what is allowed.
func Validate(m *Model, layout []Instance) ([]Instance, error) {
	if m == nil {
		return nil, errNilModel("Validate")
	}
	g := newGeometry(m)
	items, err := g.resolve(layout)
	if err != nil {
		return nil, err
	}
	var fixed uint64
	var free []item
	for _, it := range items {
		if it.placement >= 0 {
			fixed |= g.masks[it.prof][it.placement]
		} else {
			free = append(free, it)
		}
	}
	if len(free) > 0 {
		best, ok := g.solve(fixed, free)
		if !ok {
			return nil, g.noFit(layout, fixed, free)
		}
		for i := range free {
			free[i].placement = best[i]
		}
		j := 0
		for i := range items {
			if items[i].placement < 0 {
				items[i] = free[j]
				j++
			}
		}
	}
	out := make([]Instance, len(items))
	for i, it := range items {
		pl := g.profiles[it.prof].Placements[it.placement]
		out[i] = Instance{Profile: g.profiles[it.prof].Name, Placement: &pl}
	}
	return out, nil
}

// noFit builds the error for unplaced instances that cannot all be placed.
func (g *geometry) noFit(layout []Instance, fixed uint64, free []item) error {
	need := bits.OnesCount64(fixed)
	idx := make([]int, len(free))
	var allowed []string
	seen := map[int]bool{}
	for i, it := range free {
		idx[i] = it.idx
		need += g.profiles[it.prof].MemorySlices()
		if !seen[it.prof] {
			seen[it.prof] = true
			allowed = append(allowed, allowedPlacements(g.profiles[it.prof]))
		}
	}
	names := make([]string, len(free))
	for i, it := range free {
		names[i] = g.describe(it)
	}
	msg := fmt.Sprintf("no placement of %s fits", strings.Join(names, ", "))
	if fixed != 0 {
		msg += fmt.Sprintf(" beside the placed instances (free memory slices %s)", joinInts(maskSlices(g.full&^fixed)))
	}
	if need > g.m.MemorySlices {
		msg += fmt.Sprintf(": the layout needs %d memory slices, the GPU has %d", need, g.m.MemorySlices)
	}
	e := &ValidationError{Model: g.m.Name, Kind: ConflictNoFit, Instances: idx, Slices: maskSlices(g.full &^ fixed),
		Allowed: strings.Join(allowed, "; "), msg: msg}
	for _, i := range idx {
		e.Profiles = append(e.Profiles, layout[i].Profile)
	}
	return e
}
