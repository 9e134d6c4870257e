package topology

import (
	"errors"
	"fmt"
	"slices"
)

// maxExhaustive is the number of candidate subsets BestSet scores one by one before it switches to
// a greedy search. C(16, 8) = 12870 and C(24, 6) = 134596 are searched exhaustively.
const maxExhaustive = 200_000

// BestSet chooses n of the candidate GPU indexes (nil means every GPU of t) whose interconnect is
// the best, and returns them in ascending order. Sets are compared on, in order:
//
//  1. the fewest NVLinks between any two members (more is better: the slowest pair bounds
//     collective operations),
//  2. the total NVLinks over all pairs (more is better),
//  3. the PCIe levels of the pairs, from the loosest level down: fewer pairs at SYS, then fewer
//     at NODE, PHB, PXB (an unknown level counts as looser than SYS),
//  4. the number of distinct NUMA nodes (fewer is better; an unknown node counts as one more),
//
// and, on a tie, the lexicographically smallest list of indexes wins, so the answer is
// deterministic. Every subset is scored when there are at most 200,000 of them; beyond that BestSet
// grows the set greedily from the best pair, adding the GPU that scores best each time.
//
// It is an error if n < 1, n > len(candidates), or a candidate is repeated or not a GPU of t.
func BestSet(t *Topology, n int, candidates []int) ([]int, error) {
	if t == nil {
		return nil, errors.New("topology: BestSet: nil *Topology (use nvmltopology.Discover)")
	}
	if candidates == nil {
		for i := range t.GPUs {
			candidates = append(candidates, i)
		}
	}
	cand := slices.Clone(candidates)
	slices.Sort(cand)
	for k, c := range cand {
		if c < 0 || c >= len(t.GPUs) {
			return nil, fmt.Errorf("topology: BestSet: candidate %d is not a GPU index (0..%d)", c, len(t.GPUs)-1)
		}
		if k > 0 && cand[k-1] == c {
			return nil, fmt.Errorf("topology: BestSet: candidate %d is listed twice", c)
		}
	}
	if n < 1 || n > len(cand) {
		return nil, fmt.Errorf("topology: BestSet: cannot choose %d GPUs from %d candidates", n, len(cand))
	}
	if binomial(len(cand), n) <= maxExhaustive {
		return exhaustive(t, n, cand), nil
	}
	return greedy(t, n, cand), nil
}

// score rates a set of GPUs; better reports whether a beats b.
type score struct {
	minNV, sumNV int
	levels       [int(LevelSys) + 2]int // pairs per Level.Rank()
	numa         int
}

func (a *score) better(b *score) bool {
	if a.minNV != b.minNV {
		return a.minNV > b.minNV
	}
	if a.sumNV != b.sumNV {
		return a.sumNV > b.sumNV
	}
	for r := len(a.levels) - 1; r >= 1; r-- {
		if a.levels[r] != b.levels[r] {
			return a.levels[r] < b.levels[r]
		}
	}
	return a.numa < b.numa
}

func scoreOf(t *Topology, set []int) score {
	s := score{minNV: -1}
	if len(set) < 2 {
		s.minNV = 0
	}
	var nodes []int
	for x, i := range set {
		for _, j := range set[x+1:] {
			l := t.Links[i][j]
			if s.minNV < 0 || l.NVLinks < s.minNV {
				s.minNV = l.NVLinks
			}
			s.sumNV += l.NVLinks
			s.levels[l.PCIe.Rank()]++
		}
		if nd := t.GPUs[i].NUMANode; !slices.Contains(nodes, nd) || nd < 0 {
			nodes = append(nodes, nd)
		}
	}
	s.numa = len(nodes)
	return s
}

// exhaustive scores every n-subset of cand (ascending) in lexicographic order and keeps the first
// best one.
func exhaustive(t *Topology, n int, cand []int) []int {
	pos := make([]int, n) // positions into cand, strictly increasing
	for i := range pos {
		pos[i] = i
	}
	set := make([]int, n)
	var best []int
	var bestScore score
	for {
		for i, p := range pos {
			set[i] = cand[p]
		}
		if s := scoreOf(t, set); best == nil || s.better(&bestScore) {
			best, bestScore = slices.Clone(set), s
		}
		// Advance to the next combination.
		i := n - 1
		for i >= 0 && pos[i] == len(cand)-n+i {
			i--
		}
		if i < 0 {
			return best
		}
		pos[i]++
		for k := i + 1; k < n; k++ {
			pos[k] = pos[k-1] + 1
		}
	}
}

// greedy starts from the best-scoring pair (or single GPU) and adds, one at a time, the candidate
// that makes the best-scoring set; ties go to the lower index.
func greedy(t *Topology, n int, cand []int) []int {
	set := exhaustive(t, min(n, 2), cand)
	for len(set) < n {
		var pick []int
		var pickScore score
		for _, c := range cand {
			if slices.Contains(set, c) {
				continue
			}
			try := append(slices.Clone(set), c)
			slices.Sort(try)
			if s := scoreOf(t, try); pick == nil || s.better(&pickScore) {
				pick, pickScore = try, s
			}
		}
		set = pick
	}
	return set
}

// binomial returns C(n, k), saturating at maxExhaustive+1.
func binomial(n, k int) int {
	k = min(k, n-k)
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > maxExhaustive {
			return maxExhaustive + 1
		}
	}
	return r
}
