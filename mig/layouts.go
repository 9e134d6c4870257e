package mig

import (
	"fmt"
	"strings"
)

// LayoutOption restricts layout enumeration.
type LayoutOption func(*layoutConfig)

type layoutConfig struct {
	profiles []string
}

// WithProfiles restricts enumeration to the named GPU-instance profiles (e.g. the five classic
// A100 profiles "1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"). Maximality is then judged
// against these profiles only.
func WithProfiles(names ...string) LayoutOption {
	return func(c *layoutConfig) { c.profiles = append(c.profiles, names...) }
}

// layoutItem is one (profile, placement) pair that a layout may contain.
type layoutItem struct {
	prof, placement int
	mask            uint64
}

// enumerate calls visit for every valid position-aware layout, including the empty one, with the
// chosen items and whether the layout is maximal.
func enumerate(m *Model, opts []LayoutOption, visit func(chosen []layoutItem, maximal bool)) error {
	var cfg layoutConfig
	for _, o := range opts {
		o(&cfg)
	}
	g := newGeometry(m)
	allowed := make([]bool, len(g.profiles))
	if len(cfg.profiles) == 0 {
		for i := range allowed {
			allowed[i] = true
		}
	}
	for _, n := range cfg.profiles {
		pi := g.profileIndex(n)
		if pi < 0 {
			return &ValidationError{Model: m.Name, Kind: ConflictUnknownProfile, Profiles: []string{n},
				Allowed: strings.Join(m.ProfileNames(), ", "), msg: fmt.Sprintf("unknown profile %q", n)}
		}
		allowed[pi] = true
	}
	var items []layoutItem
	for pi, ms := range g.masks {
		if !allowed[pi] {
			continue
		}
		for j, mk := range ms {
			items = append(items, layoutItem{prof: pi, placement: j, mask: mk})
		}
	}
	st := newLayoutState(g)
	var chosen []layoutItem
	canAdd := func(it layoutItem, used uint64) bool {
		return it.mask&used == 0 && st.fits(it.prof)
	}
	var rec func(start int, used uint64)
	rec = func(start int, used uint64) {
		maximal := true
		for _, it := range items {
			if canAdd(it, used) {
				maximal = false
				break
			}
		}
		visit(chosen, maximal)
		for i := start; i < len(items); i++ {
			it := items[i]
			if !canAdd(it, used) {
				continue
			}
			st.add(it.prof, 1)
			chosen = append(chosen, it)
			rec(i+1, used|it.mask)
			chosen = chosen[:len(chosen)-1]
			st.add(it.prof, -1)
		}
	}
	rec(0, 0)
	return nil
}

// layoutState tracks the counters that decide whether one more instance of a profile is allowed:
// instance counts, media-engine exclusivity and compute slices.
type layoutState struct {
	g                    *geometry
	counts               []int
	me, all, plain, nome int
	compute              int
}

func newLayoutState(g *geometry) *layoutState {
	return &layoutState{g: g, counts: make([]int, len(g.profiles))}
}

func (s *layoutState) add(pi, d int) {
	s.counts[pi] += d
	s.compute += d * s.g.profiles[pi].ComputeSlices
	switch s.g.parsed[pi].mediaClass() {
	case mediaME:
		s.me += d
	case mediaAllME:
		s.all += d
	case mediaPlain:
		s.plain += d
	case mediaNoME:
		s.nome += d
	}
}

// fits reports whether one more instance of profile pi keeps the counters valid.
func (s *layoutState) fits(pi int) bool {
	p := s.g.profiles[pi]
	if s.counts[pi]+1 > p.InstanceCount {
		return false
	}
	if s.g.m.ComputeSlices > 0 && s.compute+p.ComputeSlices > s.g.m.ComputeSlices {
		return false
	}
	switch s.g.parsed[pi].mediaClass() {
	case mediaME:
		return s.me == 0 && s.all == 0
	case mediaAllME:
		return s.all == 0 && s.me == 0 && s.plain == 0
	case mediaPlain:
		return s.all == 0
	}
	return true
}

func (g *geometry) instances(chosen []layoutItem) []Instance {
	out := make([]Instance, len(chosen))
	for i, it := range chosen {
		pl := g.profiles[it.prof].Placements[it.placement]
		out[i] = Instance{Profile: g.profiles[it.prof].Name, Placement: &pl}
	}
	return out
}

// Layouts returns every valid position-aware layout of the model: every set of (profile,
// placement) pairs that Validate accepts, except the empty layout. Two layouts that differ only in
// where an instance sits are different layouts. Instances are ordered by catalog profile order, then
// by start.
func Layouts(m *Model, opts ...LayoutOption) ([][]Instance, error) {
	if m == nil {
		return nil, errNilModel("Layouts")
	}
	g := newGeometry(m)
	var out [][]Instance
	err := enumerate(m, opts, func(chosen []layoutItem, _ bool) {
		if len(chosen) > 0 {
			out = append(out, g.instances(chosen))
		}
	})
	return out, err
}

// MaximalLayouts returns the valid layouts to which no further instance (of the allowed profiles)
// can be added.
func MaximalLayouts(m *Model, opts ...LayoutOption) ([][]Instance, error) {
	if m == nil {
		return nil, errNilModel("MaximalLayouts")
	}
	g := newGeometry(m)
	var out [][]Instance
	err := enumerate(m, opts, func(chosen []layoutItem, maximal bool) {
		if maximal && len(chosen) > 0 {
			out = append(out, g.instances(chosen))
		}
	})
	return out, err
}

// CountLayouts returns the number of valid non-empty layouts and of maximal ones without
// materialising them.
func CountLayouts(m *Model, opts ...LayoutOption) (valid, maximal int, err error) {
	if m == nil {
		return 0, 0, errNilModel("CountLayouts")
	}
	err = enumerate(m, opts, func(chosen []layoutItem, max bool) {
		if len(chosen) == 0 {
			return
		}
		valid++
		if max {
			maximal++
		}
	})
	return valid, maximal, err
}

// Diagram draws a layout over the model's memory slices, one row per instance, in the manner of
// the placement figures in NVIDIA's MIG user guide:
//
//	A100-SXM4-40GB: 8 memory slices, 7 compute slices
//	             | 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 |
//	3g.20gb@0    |###############|   |   |   |   |
//	2g.10gb@4    |   |   |   |   |#######|   |   |
//	free memory slices: 6,7
//
// Instances without placements are assigned as Validate does. An invalid layout is drawn as far as
// possible (placed instances only) and followed by a line starting "invalid:".
func Diagram(m *Model, layout []Instance) string {
	if m == nil {
		return "invalid: " + errNilModel("Diagram").Error() + "\n"
	}
	placed, err := Validate(m, layout)
	if err != nil {
		placed = nil
		for _, in := range layout {
			if in.Placement != nil {
				if p, ok := m.Profile(in.Profile); ok {
					pl := Placement{Start: in.Placement.Start, Size: p.MemorySlices()}
					if in.Placement.Size != 0 {
						pl.Size = in.Placement.Size
					}
					placed = append(placed, Instance{Profile: in.Profile, Placement: &pl})
				}
			}
		}
	}
	labels := make([]string, len(placed))
	width := 0
	for i, in := range placed {
		labels[i] = in.String()
		width = max(width, len(labels[i]))
	}
	width += 2
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d memory slices, %d compute slices\n", m.Name, m.MemorySlices, m.ComputeSlices)
	b.WriteString(strings.Repeat(" ", width))
	for s := 0; s < m.MemorySlices; s++ {
		fmt.Fprintf(&b, "|%2d ", s)
	}
	b.WriteString("|\n")
	var used uint64
	row := func(label string, mask uint64) {
		b.WriteString(label)
		b.WriteString(strings.Repeat(" ", width-len(label)))
		for s := 0; s < m.MemorySlices; s++ {
			in := mask&(1<<uint(s)) != 0
			next := s+1 < m.MemorySlices && mask&(1<<uint(s+1)) != 0
			switch {
			case in && next:
				b.WriteString("|####")
				s++
				// keep joining while the run continues
				for s+1 < m.MemorySlices && mask&(1<<uint(s+1)) != 0 {
					b.WriteString("####")
					s++
				}
				b.WriteString("###")
			case in:
				b.WriteString("|###")
			default:
				b.WriteString("|   ")
			}
		}
		b.WriteString("|\n")
	}
	for i, in := range placed {
		mk := placementMask(*in.Placement)
		used |= mk
		row(labels[i], mk)
	}
	if free := maskSlices((uint64(1)<<uint(m.MemorySlices) - 1) &^ used); len(free) > 0 {
		fmt.Fprintf(&b, "free memory slices: %s\n", joinInts(free))
	} else {
		b.WriteString("free memory slices: none\n")
	}
	if err != nil {
		fmt.Fprintf(&b, "invalid: %v\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return b.String()
}
