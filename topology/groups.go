package topology

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// Group is a set of GPUs of one node that share an interconnect: an NVLink island, a PCIe switch,
// an NVLink clique. Its ID is derived from the hardware, so the same GPUs in the same slots get
// the same ID after every restart; it is meant to be compared with IDs of the same kind of group
// on the same node, as a ResourceSlice attribute that matchAttribute constraints compare.
type Group struct {
	// ID names the group (see the method that returned it).
	ID string `json:"id"`
	// GPUs are the indexes of the members, ascending.
	GPUs []int `json:"gpus"`
}

// Islands returns the NVLink islands of the node: the connected components of the graph whose
// edges are the pairs of GPUs with at least one NVLink between them, directly or through
// NVSwitches. Every GPU behind one set of NVSwitches is on one island; two GPUs joined by an
// NVLink bridge form an island of their own. A GPU with no NVLink path to another GPU is on no
// island. The ID of an island is the canonical PCI bus ID of its member with the lowest bus ID
// ("0000:07:00.0"; the lowest UUID when no member has a bus ID). Islands are sorted by their
// lowest member.
func (t *Topology) Islands() []Group {
	return t.components(func(i, j int) bool { return t.Links[i][j].NVLinks > 0 })
}

// PCIeSwitches returns the groups of GPUs that share a PCIe switch (or a tree of switches) below
// their host bridge, as NVML sees it: the connected components of the pairs whose PCIe path is
// PIX or PXB. Only groups that differ from their PCIe root are returned, that is, switches whose
// root complex has other GPUs besides theirs: where a switch holds every GPU of its root,
// resource.kubernetes.io/pcieRoot already names the same group. IDs are formed as for Islands.
func (t *Topology) PCIeSwitches() []Group {
	all := t.components(func(i, j int) bool {
		l := t.Links[i][j].PCIe
		return (l == LevelPIX || l == LevelPXB) && t.GPUs[i].PCIBusID != "" && t.GPUs[j].PCIBusID != ""
	})
	var out []Group
	for _, g := range all {
		root := t.GPUs[g.GPUs[0]].PCIeRoot
		if root == "" {
			continue // no root to differ from
		}
		n := 0
		for _, h := range t.GPUs {
			if h.PCIeRoot == root {
				n++
			}
		}
		if n > len(g.GPUs) {
			out = append(out, g)
		}
	}
	return out
}

// NVLinkCliques returns the maximal sets of two or more GPUs in which every pair has NVLinks
// between them (directly or through NVSwitches). On NVSwitch systems and on bridged pairs each
// island is one clique; in a partial mesh (a hybrid cube-mesh of eight GPUs, where each GPU has
// links to four others) a GPU is in several cliques, which a single island value cannot say. The
// ID of a clique is "nvlc-" and 16 hexadecimal digits of a hash of its members' bus IDs (UUIDs
// where a member has none), since cliques can share their lowest member. Cliques are sorted by
// their members.
func (t *Topology) NVLinkCliques() []Group {
	n := len(t.GPUs)
	adj := func(i, j int) bool { return i != j && t.Links[i][j].NVLinks > 0 }
	var out []Group
	// Bron–Kerbosch without pivoting: nodes have at most a few dozen GPUs.
	var expand func(r, p, x []int)
	expand = func(r, p, x []int) {
		if len(p) == 0 && len(x) == 0 {
			if len(r) >= 2 {
				members := slices.Sorted(slices.Values(r))
				out = append(out, Group{ID: t.cliqueID(members), GPUs: members})
			}
			return
		}
		for len(p) > 0 {
			v := p[0]
			var np, nx []int
			for _, u := range p {
				if adj(u, v) {
					np = append(np, u)
				}
			}
			for _, u := range x {
				if adj(u, v) {
					nx = append(nx, u)
				}
			}
			expand(append(slices.Clone(r), v), np, nx)
			p = p[1:]
			x = append(x, v)
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	expand(nil, all, nil)
	slices.SortFunc(out, func(a, b Group) int { return slices.Compare(a.GPUs, b.GPUs) })
	return out
}

// components returns the connected components of two or more GPUs under edge, sorted by their
// lowest member.
func (t *Topology) components(edge func(i, j int) bool) []Group {
	n := len(t.GPUs)
	seen := make([]bool, n)
	var out []Group
	for s := range n {
		if seen[s] {
			continue
		}
		seen[s] = true
		members := []int{s}
		for k := 0; k < len(members); k++ {
			for j := range n {
				if !seen[j] && j != members[k] && edge(members[k], j) {
					seen[j] = true
					members = append(members, j)
				}
			}
		}
		if len(members) < 2 {
			continue
		}
		slices.Sort(members)
		out = append(out, Group{ID: t.lowestID(members), GPUs: members})
	}
	return out
}

// lowestID is the lowest bus ID of the members, else their lowest UUID, else "".
func (t *Topology) lowestID(members []int) string {
	var bus, uuids []string
	for _, i := range members {
		if b := t.GPUs[i].PCIBusID; b != "" {
			bus = append(bus, b)
		}
		if u := t.GPUs[i].UUID; u != "" {
			uuids = append(uuids, u)
		}
	}
	switch {
	case len(bus) > 0:
		return slices.Min(bus)
	case len(uuids) > 0:
		return slices.Min(uuids)
	}
	return ""
}

// cliqueID hashes the sorted hardware identities of the members.
func (t *Topology) cliqueID(members []int) string {
	ids := make([]string, 0, len(members))
	for _, i := range members {
		id := t.GPUs[i].PCIBusID
		if id == "" {
			id = t.GPUs[i].UUID
		}
		if id == "" {
			return ""
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	h := fnv.New64a()
	_, _ = h.Write([]byte(strings.Join(ids, ",")))
	return fmt.Sprintf("nvlc-%016x", h.Sum64())
}

// Order returns every GPU index once, in an order for publishing devices to an allocator that
// takes the first devices that fit (the Kubernetes scheduler's DRA allocator does): the GPUs on
// no NVLink island come first, then the islands from the smallest to the largest (ties: the one
// with the lower first GPU), each island's GPUs together; within each of these blocks GPUs of one
// NUMA node are together, within those the GPUs of one PCIe root, then of one PCIe switch, and
// otherwise GPUs keep their index order. So single-GPU claims use GPUs that large claims need
// least, a claim for several GPUs takes GPUs that sit together, and a whole island stays free as
// long as smaller ones can serve. On a node whose index order already keeps every island, NUMA
// node and PCIe root together (as NVML's bus-ordered indexes usually do), Order is the index
// order.
func (t *Topology) Order() []int {
	n := len(t.GPUs)
	block := make([]int, n) // 0: no island; k+1: island k
	size := make([]int, n)  // the size of the GPU's block
	islands := t.Islands()
	for k, g := range islands {
		for _, i := range g.GPUs {
			block[i] = k + 1
		}
	}
	counts := map[int]int{}
	for i := range n {
		counts[block[i]]++
	}
	for i := range n {
		size[i] = counts[block[i]]
		if block[i] == 0 {
			size[i] = 0 // GPUs on no island go first, whatever their number
		}
	}
	switchOf := map[int]string{}
	for _, g := range t.PCIeSwitches() {
		for _, i := range g.GPUs {
			switchOf[i] = g.ID
		}
	}
	// first[key] is the lowest index with that key within the GPU's block: sorting by it keeps
	// each group together and the groups in index order.
	first := func(key func(i int) string) []int {
		lowest := map[[2]string]int{}
		out := make([]int, n)
		for i := range n {
			k := [2]string{fmt.Sprint(block[i]), key(i)}
			if _, ok := lowest[k]; !ok {
				lowest[k] = i
			}
			out[i] = lowest[k]
		}
		return out
	}
	blockFirst := first(func(int) string { return "" })
	numaFirst := first(func(i int) string { return fmt.Sprint(t.GPUs[i].NUMANode) })
	rootFirst := first(func(i int) string { return fmt.Sprint(t.GPUs[i].NUMANode, "/", t.GPUs[i].PCIeRoot) })
	switchFirst := first(func(i int) string {
		return fmt.Sprint(t.GPUs[i].NUMANode, "/", t.GPUs[i].PCIeRoot, "/", switchOf[i])
	})
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(size[a], size[b]), cmp.Compare(blockFirst[a], blockFirst[b]),
			cmp.Compare(numaFirst[a], numaFirst[b]), cmp.Compare(rootFirst[a], rootFirst[b]),
			cmp.Compare(switchFirst[a], switchFirst[b]), cmp.Compare(a, b))
	})
	return order
}
