package topology_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
)

// members returns the member lists of groups.
func members(gs []topology.Group) [][]int {
	out := [][]int{}
	for _, g := range gs {
		out = append(out, g.GPUs)
	}
	return out
}

// TestIslands: the islands of every fake machine are the NVLink-connected groups NVIDIA's
// systems have (docs/hardware.md): all eight GPUs of a DGX behind their NVSwitches,
// all four GB200 GPUs on the rack's NVLink switches, the bridged A30 pairs, and none on PCIe-only
// machines. Named after the lowest bus ID of the members.
func TestIslands(t *testing.T) {
	all8 := [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}
	tests := []struct {
		machine string
		opts    []gputest.Option
		want    [][]int
		ids     []string
	}{
		{"dgx-a100-40gb", nil, all8, []string{"0000:07:00.0"}},
		{"dgx-a100-80gb", nil, all8, []string{"0000:07:00.0"}},
		{"dgx-h100", nil, all8, []string{"0000:1b:00.0"}},
		{"dgx-h200", nil, all8, []string{"0000:1b:00.0"}},
		{"dgx-b200", nil, all8, []string{"0000:1b:00.0"}},
		{"gb200-nvl4", nil, [][]int{{0, 1, 2, 3}}, []string{"0008:01:00.0"}},
		{"a30x4", nil, [][]int{{0, 1}, {2, 3}}, []string{"0000:17:00.0", "0000:ca:00.0"}},
		{"a30x4", []gputest.Option{gputest.WithNVLinkBridges([2]int{0, 2}, [2]int{1, 3})}, [][]int{{0, 2}, {1, 3}}, []string{"0000:17:00.0", "0000:65:00.0"}},
		{"a30x4", []gputest.Option{gputest.WithNVLinkBridges([2]int{1, 2})}, [][]int{{1, 2}}, []string{"0000:65:00.0"}},
		{"a30x4", []gputest.Option{gputest.WithNVLinkBridges()}, [][]int{}, nil},
		{"l4x8", nil, [][]int{}, nil},
		{"a10gx4", nil, [][]int{}, nil},
		{"rtx-pro-6000x4", nil, [][]int{}, nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.machine, len(tc.opts)), func(t *testing.T) {
			topo := discover(t, tc.machine, tc.opts...)
			got := topo.Islands()
			if diff := cmp.Diff(tc.want, members(got)); diff != "" {
				t.Errorf("islands (-want +got):\n%s", diff)
			}
			var ids []string
			for _, g := range got {
				ids = append(ids, g.ID)
			}
			if diff := cmp.Diff(tc.ids, ids); diff != "" {
				t.Errorf("island IDs (-want +got):\n%s", diff)
			}
			// Same hardware, same IDs: a second machine (a restart) gives equal islands.
			if diff := cmp.Diff(got, discover(t, tc.machine, tc.opts...).Islands()); diff != "" {
				t.Errorf("islands differ between two discoveries (-first +second):\n%s", diff)
			}
		})
	}
}

// dgx1Mesh is the NVLink matrix of a DGX-1 with V100s (hybrid cube-mesh): two quads linked all
// to all within, and each GPU linked to its counterpart in the other quad, six links per GPU. The
// NV counts of GPUs 0 and 1 are those of the DGX-1 topology NCCL dumped in
// github.com/NVIDIA/nccl issue 671; PCIe levels are left out (SYS).
var dgx1Mesh = []string{
	"X NV1 NV1 NV2 NV2 SYS SYS SYS",
	"NV1 X NV2 NV1 SYS NV2 SYS SYS",
	"NV1 NV2 X NV2 SYS SYS NV1 SYS",
	"NV2 NV1 NV2 X SYS SYS SYS NV1",
	"NV2 SYS SYS SYS X NV1 NV1 NV2",
	"SYS NV2 SYS SYS NV1 X NV2 NV1",
	"SYS SYS NV1 SYS NV1 NV2 X NV2",
	"SYS SYS SYS NV1 NV2 NV1 NV2 X",
}

// fromMatrix builds a topology from nvidia-smi topo -m cells; GPU i gets bus 0000:<i+1>0:00.0.
func fromMatrix(rows []string, numa []int) *topology.Topology {
	n := len(rows)
	topo := &topology.Topology{Links: make([][]topology.Link, n)}
	for i, r := range rows {
		topo.GPUs = append(topo.GPUs, topology.GPU{Index: i, NUMANode: numa[i], PCIBusID: fmt.Sprintf("0000:%x0:00.0", i+1)})
		topo.Links[i] = make([]topology.Link, n)
		for j, c := range strings.Fields(r) {
			var nv int
			if _, err := fmt.Sscanf(c, "NV%d", &nv); err == nil {
				topo.Links[i][j].NVLinks = nv
			} else if c != "X" {
				var l topology.Level
				if err := l.UnmarshalText([]byte(c)); err != nil {
					panic(err)
				}
				topo.Links[i][j].PCIe = l
			}
		}
	}
	return topo
}

// bruteCliques enumerates every subset of two or more GPUs and keeps the maximal ones whose pairs
// all have NVLinks.
func bruteCliques(topo *topology.Topology) [][]int {
	n := len(topo.GPUs)
	complete := func(mask int) bool {
		for i := range n {
			for j := i + 1; j < n; j++ {
				if mask&(1<<i) != 0 && mask&(1<<j) != 0 && topo.Links[i][j].NVLinks == 0 {
					return false
				}
			}
		}
		return true
	}
	var masks []int
	for mask := 1; mask < 1<<n; mask++ {
		if bitsOf(mask) >= 2 && complete(mask) {
			masks = append(masks, mask)
		}
	}
	out := [][]int{}
	for _, m := range masks {
		maximal := true
		for _, o := range masks {
			if o != m && o&m == m {
				maximal = false
			}
		}
		if maximal {
			var set []int
			for i := range n {
				if m&(1<<i) != 0 {
					set = append(set, i)
				}
			}
			out = append(out, set)
		}
	}
	slices.SortFunc(out, func(a, b []int) int { return slices.Compare(a, b) })
	return out
}

func bitsOf(m int) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}

// bruteIslands joins GPUs linked by NVLink until nothing changes.
func bruteIslands(topo *topology.Topology) [][]int {
	n := len(topo.GPUs)
	label := make([]int, n)
	for i := range label {
		label[i] = i
	}
	for changed := true; changed; {
		changed = false
		for i := range n {
			for j := range n {
				if i != j && topo.Links[i][j].NVLinks > 0 && label[j] > label[i] {
					label[j], changed = label[i], true
				}
			}
		}
	}
	out := [][]int{}
	for l := range n {
		var set []int
		for i := range n {
			if label[i] == l {
				set = append(set, i)
			}
		}
		if len(set) >= 2 {
			out = append(out, set)
		}
	}
	return out
}

func TestNVLinkCliques(t *testing.T) {
	mesh := fromMatrix(dgx1Mesh, []int{0, 0, 0, 0, 1, 1, 1, 1})
	// Written from the published matrix: the two fully linked quads, and the four cross links.
	want := [][]int{{0, 1, 2, 3}, {0, 4}, {1, 5}, {2, 6}, {3, 7}, {4, 5, 6, 7}}
	got := mesh.NVLinkCliques()
	if diff := cmp.Diff(want, members(got)); diff != "" {
		t.Errorf("DGX-1 cliques (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]int{{0, 1, 2, 3, 4, 5, 6, 7}}, members(mesh.Islands())); diff != "" {
		t.Errorf("DGX-1 islands (-want +got):\n%s", diff)
	}
	ids := map[string]bool{}
	for _, g := range got {
		if !strings.HasPrefix(g.ID, "nvlc-") || len(g.ID) != 21 || ids[g.ID] {
			t.Errorf("clique %v has ID %q (want nvlc- and 16 hex digits, unique)", g.GPUs, g.ID)
		}
		ids[g.ID] = true
	}
	// On the fake machines every island is one clique.
	for _, name := range gputest.Machines() {
		topo := discover(t, name)
		if diff := cmp.Diff(members(topo.Islands()), members(topo.NVLinkCliques())); diff != "" {
			t.Errorf("%s: cliques differ from islands (-islands +cliques):\n%s", name, diff)
		}
	}
}

// randomTopology links each pair by NVLink with probability p and gives GPUs random NUMA nodes,
// PCIe levels and roots.
func randomTopology(rng *rand.Rand, n int, p float64) *topology.Topology {
	topo := &topology.Topology{Links: make([][]topology.Link, n)}
	for i := range n {
		topo.GPUs = append(topo.GPUs, topology.GPU{Index: i, NUMANode: rng.IntN(2), PCIBusID: fmt.Sprintf("0000:%02x:00.0", 0x10+i),
			PCIeRoot: fmt.Sprintf("pci0000:%02x", rng.IntN(3))})
		topo.Links[i] = make([]topology.Link, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			l := topology.Link{PCIe: topology.Level(1 + rng.IntN(5))}
			if rng.Float64() < p {
				l.NVLinks = 1 + rng.IntN(12)
			}
			topo.Links[i][j], topo.Links[j][i] = l, l
		}
	}
	return topo
}

// TestGroupsAgainstBruteForce compares islands and cliques with brute force on random graphs.
func TestGroupsAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 1))
	for k := range 300 {
		topo := randomTopology(rng, 2+rng.IntN(8), rng.Float64())
		if diff := cmp.Diff(bruteIslands(topo), members(topo.Islands())); diff != "" {
			t.Fatalf("graph %d: islands (-brute +got):\n%s", k, diff)
		}
		if diff := cmp.Diff(bruteCliques(topo), members(topo.NVLinkCliques())); diff != "" {
			t.Fatalf("graph %d: cliques (-brute +got):\n%s", k, diff)
		}
	}
}

func TestPCIeSwitches(t *testing.T) {
	// One host bridge per socket with two PCIe switches of two GPUs each below it (PIX within a
	// switch, PHB across switches of one root), SYS across sockets; GPU 6 alone on a root.
	rows := []string{
		"X PIX PHB PHB SYS SYS SYS",
		"PIX X PHB PHB SYS SYS SYS",
		"PHB PHB X PIX SYS SYS SYS",
		"PHB PHB PIX X SYS SYS SYS",
		"SYS SYS SYS SYS X PXB SYS",
		"SYS SYS SYS SYS PXB X SYS",
		"SYS SYS SYS SYS SYS SYS X",
	}
	topo := fromMatrix(rows, []int{0, 0, 0, 0, 1, 1, 1})
	for i, r := range []string{"pci0000:10", "pci0000:10", "pci0000:10", "pci0000:10", "pci0000:50", "pci0000:50", "pci0000:70"} {
		topo.GPUs[i].PCIeRoot = r
	}
	// GPUs 4-5 share a switch that is all of their root: pcieRoot already says it.
	want := []topology.Group{{ID: "0000:10:00.0", GPUs: []int{0, 1}}, {ID: "0000:30:00.0", GPUs: []int{2, 3}}}
	if diff := cmp.Diff(want, topo.PCIeSwitches()); diff != "" {
		t.Errorf("switches (-want +got):\n%s", diff)
	}
	// On every fake machine each switch holds all the GPUs of its root.
	for _, name := range gputest.Machines() {
		if got := discover(t, name).PCIeSwitches(); got != nil {
			t.Errorf("%s: switches %v, want none (each switch is its root's)", name, got)
		}
	}
	if !strings.Contains(topology.Render(topo), "PCIe switches below a shared root:\n  0000:10:00.0: GPU0 GPU1\n  0000:30:00.0: GPU2 GPU3\n") {
		t.Errorf("Render does not list the switches:\n%s", topology.Render(topo))
	}
}

// checkOrder checks the properties Order promises: a permutation, GPUs on no island first, then
// islands by size, each together, and within each block NUMA nodes and roots together.
func checkOrder(t *testing.T, topo *topology.Topology, order []int) {
	t.Helper()
	n := len(topo.GPUs)
	if got := slices.Sorted(slices.Values(order)); !slices.Equal(got, seq(n)) {
		t.Fatalf("order %v is not a permutation of 0..%d", order, n-1)
	}
	island := map[int]int{}
	for k, g := range topo.Islands() {
		for _, i := range g.GPUs {
			island[i] = k + 1
		}
	}
	sizeOf := func(i int) int {
		if island[i] == 0 {
			return 0
		}
		return len(topo.Islands()[island[i]-1].GPUs)
	}
	together := func(what string, key func(i int) string) {
		seen, last := map[string]bool{}, ""
		for _, i := range order {
			k := fmt.Sprint(island[i], "/", key(i))
			if k != last && seen[k] {
				t.Errorf("order %v splits %s %s", order, what, k)
			}
			seen[k], last = true, k
		}
	}
	for p := 1; p < n; p++ {
		if sizeOf(order[p-1]) > sizeOf(order[p]) {
			t.Errorf("order %v puts GPU %d (block of %d) before GPU %d (block of %d)", order, order[p-1], sizeOf(order[p-1]), order[p], sizeOf(order[p]))
		}
	}
	together("island", func(int) string { return "" })
	together("NUMA node", func(i int) string { return fmt.Sprint(topo.GPUs[i].NUMANode) })
	together("PCIe root", func(i int) string { return fmt.Sprint(topo.GPUs[i].NUMANode, topo.GPUs[i].PCIeRoot) })
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestOrder(t *testing.T) {
	// NVML numbers GPUs in bus order, which on every fake machine keeps islands, NUMA nodes and
	// PCIe roots together: the order is the index order.
	for _, name := range gputest.Machines() {
		topo := discover(t, name)
		if got := topo.Order(); !slices.Equal(got, seq(len(topo.GPUs))) {
			t.Errorf("%s: order %v, want the index order", name, got)
		}
	}
	tests := []struct {
		name string
		topo *topology.Topology
		want []int
	}{
		// Bridges join GPUs 0-2 and 1-3 (each pair across the sockets): islands first.
		{"crossed bridges", discover(t, "a30x4", gputest.WithNVLinkBridges([2]int{0, 2}, [2]int{1, 3})), []int{0, 2, 1, 3}},
		// One bridge: the unbridged GPUs serve single-GPU claims first.
		{"one bridge", discover(t, "a30x4", gputest.WithNVLinkBridges([2]int{0, 1})), []int{2, 3, 0, 1}},
		// An island of four (GPUs 0, 2, 4, 6 on NVSwitches) and a bridged pair (5, 7): the pair
		// before the quad, the unlinked GPUs (1, 3) first.
		{"mixed islands", fromMatrix([]string{
			"X SYS NV12 SYS NV12 SYS NV12 SYS",
			"SYS X SYS SYS SYS SYS SYS SYS",
			"NV12 SYS X SYS NV12 SYS NV12 SYS",
			"SYS SYS SYS X SYS SYS SYS SYS",
			"NV12 SYS NV12 SYS X SYS NV12 SYS",
			"SYS SYS SYS SYS SYS X SYS NV4",
			"NV12 SYS NV12 SYS NV12 SYS X SYS",
			"SYS SYS SYS SYS SYS NV4 SYS X",
		}, []int{0, 0, 0, 0, 0, 0, 0, 0}), []int{1, 3, 5, 7, 0, 2, 4, 6}},
		// No NVLink, NUMA nodes interleaved by index: GPUs of one node together.
		{"interleaved NUMA", fromMatrix([]string{
			"X SYS NODE SYS",
			"SYS X SYS NODE",
			"NODE SYS X SYS",
			"SYS NODE SYS X",
		}, []int{0, 1, 0, 1}), []int{0, 2, 1, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.topo.Order()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			checkOrder(t, tc.topo, got)
		})
	}
	rng := rand.New(rand.NewPCG(18, 2))
	for range 300 {
		topo := randomTopology(rng, 1+rng.IntN(12), rng.Float64()*0.5)
		checkOrder(t, topo, topo.Order())
	}
}
