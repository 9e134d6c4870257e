package topology_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/topology"
)

func TestBestSetMachines(t *testing.T) {
	tests := []struct {
		machine    string
		n          int
		candidates []int
		want       []int
	}{
		// DGX A100: every pair NV12; pairs (0,1) (2,3) (4,5) (6,7) share a PCIe switch (PXB),
		// everything else is SYS.
		{"dgx-a100-40gb", 1, nil, []int{0}},
		{"dgx-a100-40gb", 2, nil, []int{0, 1}},
		{"dgx-a100-40gb", 2, []int{1, 2, 3}, []int{2, 3}},
		{"dgx-a100-40gb", 2, []int{7, 0, 6}, []int{6, 7}},
		{"dgx-a100-40gb", 3, []int{0, 2, 4, 6, 7}, []int{0, 6, 7}},
		{"dgx-a100-40gb", 4, nil, []int{0, 1, 2, 3}},
		{"dgx-a100-40gb", 4, []int{0, 2, 3, 4, 5, 6}, []int{2, 3, 4, 5}},
		{"dgx-a100-40gb", 8, nil, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		// DGX H100: every pair NV18; GPUs 0-3 on NUMA 0 and 4-7 on NUMA 1 (NODE within, SYS
		// across).
		{"dgx-h100", 2, []int{3, 4, 7}, []int{4, 7}},
		{"dgx-h100", 4, nil, []int{0, 1, 2, 3}},
		{"dgx-h100", 4, []int{0, 1, 4, 5, 6, 7}, []int{4, 5, 6, 7}},
		{"dgx-h100", 5, nil, []int{0, 1, 2, 3, 4}},
		{"dgx-h100", 5, []int{0, 1, 2, 4, 5, 6, 7}, []int{0, 4, 5, 6, 7}},
		// L4x8: no NVLink; pairs behind one switch each (PIX), four per socket.
		{"l4x8", 2, []int{0, 2, 5, 7}, []int{0, 2}},
		{"l4x8", 2, []int{0, 2, 3, 5}, []int{2, 3}},
		{"l4x8", 4, []int{0, 2, 4, 5, 6}, []int{0, 4, 5, 6}},
		// A30x4: NV4 bridges 0-1 and 2-3, NODE within a socket, SYS across.
		{"a30x4", 2, []int{0, 2, 3}, []int{2, 3}},
		{"a30x4", 2, []int{1, 2, 3}, []int{2, 3}},
		{"a30x4", 2, nil, []int{0, 1}},
		{"a30x4", 3, []int{0, 1, 3}, []int{0, 1, 3}},
		// GB200: NV18 everywhere, GPUs 0-1 and 2-3 per Grace CPU.
		{"gb200-nvl4", 2, []int{1, 2, 3}, []int{2, 3}},
		{"gb200-nvl4", 3, []int{0, 2, 3}, []int{0, 2, 3}},
	}
	topos := map[string]*topology.Topology{}
	for _, tc := range tests {
		topo := topos[tc.machine]
		if topo == nil {
			topo = discover(t, tc.machine)
			topos[tc.machine] = topo
		}
		in := append([]int(nil), tc.candidates...)
		got, err := topology.BestSet(topo, tc.n, tc.candidates)
		if err != nil {
			t.Errorf("%s BestSet(%d, %v): %v", tc.machine, tc.n, tc.candidates, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s BestSet(%d, %v) (-want +got):\n%s", tc.machine, tc.n, tc.candidates, diff)
		}
		if !cmp.Equal(in, tc.candidates) {
			t.Errorf("BestSet modified its candidates: %v", tc.candidates)
		}
	}
}

// synthetic builds a topology from NVLink counts and PCIe levels of the upper triangle, pair by
// pair in the order (0,1) (0,2) ... (1,2) ...
func synthetic(numa []int, pairs ...topology.Link) *topology.Topology {
	n := len(numa)
	topo := &topology.Topology{Links: make([][]topology.Link, n)}
	for i := range n {
		topo.GPUs = append(topo.GPUs, topology.GPU{Index: i, NUMANode: numa[i]})
		topo.Links[i] = make([]topology.Link, n)
	}
	k := 0
	for i := range n {
		for j := i + 1; j < n; j++ {
			topo.Links[i][j], topo.Links[j][i] = pairs[k], pairs[k]
			k++
		}
	}
	return topo
}

func TestBestSetCriteria(t *testing.T) {
	nv := func(n int, l topology.Level) topology.Link { return topology.Link{NVLinks: n, PCIe: l} }
	pix, sys, unk := topology.LevelPIX, topology.LevelSys, topology.LevelUnknown
	// NVLinks outweigh PCIe: (0,1) is PIX with 2 links, (1,2) and (2,3) are SYS with 4.
	nvFirst := synthetic([]int{0, 0, 0, 0},
		nv(2, pix), nv(0, pix), nv(2, sys), // 0-1 0-2 0-3
		nv(4, sys), nv(2, sys), // 1-2 1-3
		nv(4, sys)) // 2-3
	// Without NVLinks and PCIe levels, the NUMA node decides.
	numaOnly := synthetic([]int{1, 0, 0}, nv(0, unk), nv(0, unk), nv(0, unk))
	// The bottleneck pair counts before the total: {0,1,2} has 12+12+0 links, {0,1,3} 12+4+4.
	minFirst := synthetic([]int{0, 0, 0, 0},
		nv(12, pix), nv(12, pix), nv(4, sys),
		nv(0, pix), nv(4, sys),
		nv(4, sys))
	// An unknown PCIe level is worse than SYS.
	unknownWorst := synthetic([]int{0, 0, 0}, nv(0, unk), nv(0, sys), nv(0, unk))
	tests := []struct {
		name string
		topo *topology.Topology
		n    int
		want []int
	}{
		{"nvlink beats pcie, pair", nvFirst, 2, []int{1, 2}},
		{"nvlink beats pcie, three", nvFirst, 3, []int{1, 2, 3}},
		{"numa", numaOnly, 2, []int{1, 2}},
		{"bottleneck", minFirst, 3, []int{0, 1, 3}},
		{"unknown level", unknownWorst, 2, []int{0, 2}},
	}
	for _, tc := range tests {
		got, err := topology.BestSet(tc.topo, tc.n, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// With C(30, 10) subsets BestSet searches greedily; it must still find the ten GPUs that are
// fully connected by NVLink.
func TestBestSetGreedy(t *testing.T) {
	n := 30
	numa := make([]int, n)
	var pairs []topology.Link
	for i := range n {
		for j := i + 1; j < n; j++ {
			l := topology.Link{PCIe: topology.LevelSys}
			if i >= 17 && j >= 17 && i < 27 && j < 27 {
				l.NVLinks = 8
			}
			pairs = append(pairs, l)
		}
	}
	got, err := topology.BestSet(synthetic(numa, pairs...), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{17, 18, 19, 20, 21, 22, 23, 24, 25, 26}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestBestSetErrors(t *testing.T) {
	topo := discover(t, "dgx-h100")
	tests := []struct {
		n          int
		candidates []int
		want       string
	}{
		{0, nil, "cannot choose 0 GPUs from 8"},
		{9, nil, "cannot choose 9 GPUs from 8"},
		{3, []int{0, 1}, "cannot choose 3 GPUs from 2"},
		{2, []int{}, "cannot choose 2 GPUs from 0"},
		{1, []int{0, 8}, "candidate 8 is not a GPU index (0..7)"},
		{1, []int{-1}, "candidate -1 is not a GPU index"},
		{1, []int{2, 1, 2}, "candidate 2 is listed twice"},
	}
	for _, tc := range tests {
		_, err := topology.BestSet(topo, tc.n, tc.candidates)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BestSet(%d, %v) = %v, want an error containing %q", tc.n, tc.candidates, err, tc.want)
		}
	}
}
