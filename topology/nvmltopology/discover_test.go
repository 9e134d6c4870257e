package nvmltopology_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

func discover(t testing.TB, name string, opts ...gputest.Option) *topology.Topology {
	t.Helper()
	m, err := gputest.New(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// cells returns the matrix of cell(link) with "X" on the diagonal, one space-separated row per GPU.
func cells(topo *topology.Topology, cell func(topology.Link) string) []string {
	var rows []string
	for i := range topo.GPUs {
		var r []string
		for j := range topo.GPUs {
			if i == j {
				r = append(r, "X")
			} else {
				r = append(r, cell(topo.Link(i, j)))
			}
		}
		rows = append(rows, strings.Join(r, " "))
	}
	return rows
}

func matrixOf(topo *topology.Topology) []string {
	return cells(topo, func(l topology.Link) string { return l.String() })
}

func pcieOf(topo *topology.Topology) []string {
	return cells(topo, func(l topology.Link) string { return l.PCIe.String() })
}

func uniform(n int, v string) []string {
	var rows []string
	for i := range n {
		r := make([]string, n)
		for j := range r {
			r[j] = v
		}
		r[i] = "X"
		rows = append(rows, strings.Join(r, " "))
	}
	return rows
}

// The expected matrices follow the wiring gputest documents for each machine: DGX A100 GPUs sit
// in pairs behind a PCIe switch, one pair per NUMA node (3,3,1,1,7,7,5,5), 12 NVLinks each into
// six NVSwitches; DGX H100/H200/B200 GPUs each have their own switch, four per NUMA node, 18
// NVLinks into NVSwitches; A30x4 has two GPUs per socket with no switch and an NVLink bridge
// (4 links, NV4) joining GPUs 0-1 and 2-3; L4x8 has pairs behind one PCIe switch each (PIX), four
// GPUs per socket; A10Gx4 hangs off one host bridge; GB200 gives each GPU one NVLink to each of
// the rack's 18 NVLink switch chips (NV18 between every pair), two GPUs per Grace CPU. The
// NVLink matrices are the ones NVIDIA's systems print (docs/hardware.md cites them).
func TestDiscoverMatrix(t *testing.T) {
	dgxA100PCIe := []string{
		"X PXB SYS SYS SYS SYS SYS SYS",
		"PXB X SYS SYS SYS SYS SYS SYS",
		"SYS SYS X PXB SYS SYS SYS SYS",
		"SYS SYS PXB X SYS SYS SYS SYS",
		"SYS SYS SYS SYS X PXB SYS SYS",
		"SYS SYS SYS SYS PXB X SYS SYS",
		"SYS SYS SYS SYS SYS SYS X PXB",
		"SYS SYS SYS SYS SYS SYS PXB X",
	}
	dgxHPCIe := []string{
		"X NODE NODE NODE SYS SYS SYS SYS",
		"NODE X NODE NODE SYS SYS SYS SYS",
		"NODE NODE X NODE SYS SYS SYS SYS",
		"NODE NODE NODE X SYS SYS SYS SYS",
		"SYS SYS SYS SYS X NODE NODE NODE",
		"SYS SYS SYS SYS NODE X NODE NODE",
		"SYS SYS SYS SYS NODE NODE X NODE",
		"SYS SYS SYS SYS NODE NODE NODE X",
	}
	l4 := []string{
		"X PIX NODE NODE SYS SYS SYS SYS",
		"PIX X NODE NODE SYS SYS SYS SYS",
		"NODE NODE X PIX SYS SYS SYS SYS",
		"NODE NODE PIX X SYS SYS SYS SYS",
		"SYS SYS SYS SYS X PIX NODE NODE",
		"SYS SYS SYS SYS PIX X NODE NODE",
		"SYS SYS SYS SYS NODE NODE X PIX",
		"SYS SYS SYS SYS NODE NODE PIX X",
	}
	a30 := []string{
		"X NODE SYS SYS",
		"NODE X SYS SYS",
		"SYS SYS X NODE",
		"SYS SYS NODE X",
	}
	a30NV := []string{
		"X NV4 SYS SYS",
		"NV4 X SYS SYS",
		"SYS SYS X NV4",
		"SYS SYS NV4 X",
	}
	tests := []struct {
		machine    string
		want, pcie []string
	}{
		{"dgx-a100-40gb", uniform(8, "NV12"), dgxA100PCIe},
		{"dgx-a100-80gb", uniform(8, "NV12"), dgxA100PCIe},
		{"dgx-h100", uniform(8, "NV18"), dgxHPCIe},
		{"dgx-h200", uniform(8, "NV18"), dgxHPCIe},
		{"dgx-b200", uniform(8, "NV18"), dgxHPCIe},
		{"a30x4", a30NV, a30},
		{"l4x8", l4, l4},
		{"a10gx4", uniform(4, "PHB"), uniform(4, "PHB")},
		{"gb200-nvl4", uniform(4, "NV18"), a30},
	}
	for _, tc := range tests {
		t.Run(tc.machine, func(t *testing.T) {
			topo := discover(t, tc.machine)
			if diff := cmp.Diff(tc.want, matrixOf(topo)); diff != "" {
				t.Errorf("matrix (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.pcie, pcieOf(topo)); diff != "" {
				t.Errorf("PCIe levels (-want +got):\n%s", diff)
			}
			for i := range topo.GPUs {
				for j := range topo.GPUs {
					if topo.Links[i][j] != topo.Links[j][i] {
						t.Errorf("Links[%d][%d] = %+v but Links[%d][%d] = %+v", i, j, topo.Links[i][j], j, i, topo.Links[j][i])
					}
				}
			}
		})
	}
}

// gpuSummary is the part of a GPU the wiring determines.
type gpuSummary struct {
	Bus   string
	NUMA  int
	Root  string
	Src   topology.RootSource
	Links int
	Peers string // "bus*links" per peer; "sw:" marks an NVSwitch, "gpuN:" a GPU
}

func summarize(topo *topology.Topology) []gpuSummary {
	var out []gpuSummary
	for i, g := range topo.GPUs {
		if g.Index != i {
			panic("GPU index out of order")
		}
		var ps []string
		for _, p := range g.Peers {
			kind := "?"
			switch {
			case p.Switch:
				kind = "sw"
			case p.GPU >= 0:
				kind = "gpu" + string(rune('0'+p.GPU))
			}
			ps = append(ps, kind+":"+p.BusID+"*"+string(rune('0'+p.Links/10))+string(rune('0'+p.Links%10)))
		}
		out = append(out, gpuSummary{g.PCIBusID, g.NUMANode, g.PCIeRoot, g.PCIeRootSource, g.NVLinks, strings.Join(ps, " ")})
	}
	return out
}

func TestDiscoverGPUs(t *testing.T) {
	d := topology.RootDerived
	a100sw := "sw:0000:c4:00.0*02 sw:0000:c5:00.0*02 sw:0000:c6:00.0*02 sw:0000:c7:00.0*02 sw:0000:c8:00.0*02 sw:0000:c9:00.0*02"
	// 18 links over 4 switches, link l to switch l*4/18: links 0-4, 5-8, 9-13, 14-17.
	h100sw := "sw:0000:05:00.0*05 sw:0000:06:00.0*04 sw:0000:07:00.0*05 sw:0000:08:00.0*04"
	// One link to each of 18 switch chips outside the node.
	var chips []string
	for i := range 18 {
		chips = append(chips, fmt.Sprintf("sw:0000:f0:%02x.0*01", i))
	}
	gb200sw := strings.Join(chips, " ")
	tests := []struct {
		machine string
		want    []gpuSummary
	}{
		{"dgx-a100-40gb", []gpuSummary{
			{"0000:07:00.0", 3, "pci0000:07", d, 12, a100sw},
			{"0000:0f:00.0", 3, "pci0000:07", d, 12, a100sw},
			{"0000:47:00.0", 1, "pci0000:47", d, 12, a100sw},
			{"0000:4e:00.0", 1, "pci0000:47", d, 12, a100sw},
			{"0000:87:00.0", 7, "pci0000:87", d, 12, a100sw},
			{"0000:90:00.0", 7, "pci0000:87", d, 12, a100sw},
			{"0000:b7:00.0", 5, "pci0000:b7", d, 12, a100sw},
			{"0000:bd:00.0", 5, "pci0000:b7", d, 12, a100sw},
		}},
		{"dgx-h100", []gpuSummary{
			{"0000:1b:00.0", 0, "pci0000:1b", d, 18, h100sw},
			{"0000:43:00.0", 0, "pci0000:43", d, 18, h100sw},
			{"0000:52:00.0", 0, "pci0000:52", d, 18, h100sw},
			{"0000:61:00.0", 0, "pci0000:61", d, 18, h100sw},
			{"0000:9d:00.0", 1, "pci0000:9d", d, 18, h100sw},
			{"0000:c3:00.0", 1, "pci0000:c3", d, 18, h100sw},
			{"0000:d1:00.0", 1, "pci0000:d1", d, 18, h100sw},
			{"0000:df:00.0", 1, "pci0000:df", d, 18, h100sw},
		}},
		{"l4x8", []gpuSummary{
			{"0000:38:00.0", 0, "pci0000:38", d, 0, ""},
			{"0000:3a:00.0", 0, "pci0000:38", d, 0, ""},
			{"0000:3c:00.0", 0, "pci0000:3c", d, 0, ""},
			{"0000:3e:00.0", 0, "pci0000:3c", d, 0, ""},
			{"0000:b8:00.0", 1, "pci0000:b8", d, 0, ""},
			{"0000:ba:00.0", 1, "pci0000:b8", d, 0, ""},
			{"0000:bc:00.0", 1, "pci0000:bc", d, 0, ""},
			{"0000:be:00.0", 1, "pci0000:bc", d, 0, ""},
		}},
		{"a10gx4", []gpuSummary{
			{"0000:00:1b.0", 0, "pci0000:00", d, 0, ""},
			{"0000:00:1c.0", 0, "pci0000:00", d, 0, ""},
			{"0000:00:1d.0", 0, "pci0000:00", d, 0, ""},
			{"0000:00:1e.0", 0, "pci0000:00", d, 0, ""},
		}},
		{"a30x4", []gpuSummary{
			{"0000:17:00.0", 0, "pci0000:17", d, 4, "gpu1:0000:65:00.0*04"},
			{"0000:65:00.0", 0, "pci0000:65", d, 4, "gpu0:0000:17:00.0*04"},
			{"0000:ca:00.0", 1, "pci0000:ca", d, 4, "gpu3:0000:e3:00.0*04"},
			{"0000:e3:00.0", 1, "pci0000:e3", d, 4, "gpu2:0000:ca:00.0*04"},
		}},
		{"gb200-nvl4", []gpuSummary{
			{"0008:01:00.0", 0, "pci0008:01", d, 18, gb200sw},
			{"0009:01:00.0", 0, "pci0009:01", d, 18, gb200sw},
			{"0018:01:00.0", 1, "pci0018:01", d, 18, gb200sw},
			{"0019:01:00.0", 1, "pci0019:01", d, 18, gb200sw},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.machine, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, summarize(discover(t, tc.machine))); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiscoverUUIDAndP2P(t *testing.T) {
	m, err := gputest.New("l4x8")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range topo.GPUs {
		want, _ := m.Device(i).GetUUID()
		if g.UUID != want || !strings.HasPrefix(g.UUID, "GPU-") {
			t.Errorf("GPU %d UUID %q, want %q", i, g.UUID, want)
		}
	}
	// PCIe-only machine: P2P works below the host bridge (the L4 pairs), not across it.
	var got []string
	for i := range topo.GPUs {
		var r []string
		for j := range topo.GPUs {
			if topo.Link(i, j).P2P {
				r = append(r, "1")
			} else {
				r = append(r, "0")
			}
		}
		got = append(got, strings.Join(r, ""))
	}
	want := []string{"01000000", "10000000", "00010000", "00100000", "00000100", "00001000", "00000001", "00000010"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("P2P (-want +got):\n%s", diff)
	}
	if h := discover(t, "dgx-h100"); !h.Link(0, 7).P2P {
		t.Error("DGX H100 GPU 0 and 7 should have P2P over NVLink")
	}
}

func TestDiscoverDomains(t *testing.T) {
	m, err := gputest.New("gb200-nvl4")
	if err != nil {
		t.Fatal(err)
	}
	f, ret := m.Device(0).GetGpuFabricInfo()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	cluster := uuid.UUID(f.ClusterUuid).String()
	topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatal(err)
	}
	want := []topology.Domain{{Fabric: topology.Fabric{ClusterUUID: cluster, CliqueID: 1}, GPUs: []int{0, 1, 2, 3}}}
	if diff := cmp.Diff(want, topo.Domains); diff != "" {
		t.Errorf("domains (-want +got):\n%s", diff)
	}
	if got, want := topo.GPUs[3].Fabric.DomainID(), cluster+".1"; got != want {
		t.Errorf("DomainID %q, want %q", got, want)
	}
	for _, name := range []string{"dgx-h100", "a30x4"} {
		if d := discover(t, name).Domains; d != nil {
			t.Errorf("%s: domains %+v, want none", name, d)
		}
	}
}

func TestPCIeRootLookup(t *testing.T) {
	topo := discover(t, "dgx-a100-40gb")
	tests := map[string]string{
		"0000:0f:00.0":     "pci0000:07",
		"00000000:0F:00.0": "pci0000:07",
		"0000:BD:00.0":     "pci0000:b7",
		"0000:01:00.0":     "",
		"not-a-bus-id":     "",
	}
	for bus, want := range tests {
		if got := topo.PCIeRoot(bus); got != want {
			t.Errorf("PCIeRoot(%q) = %q, want %q", bus, got, want)
		}
	}
	var f func(string) string = topo.PCIeRoot // fits gpudra.WithPCIeRoot
	_ = f
}

// Faults that answer ERROR_NOT_SUPPORTED leave values unknown; the rest fail Discover with an
// *Error naming the GPU and the call.
func TestDiscoverNotSupported(t *testing.T) {
	ns := nvml.ERROR_NOT_SUPPORTED
	tests := []struct {
		name    string
		machine string
		fault   gputest.Option
		check   func(t *testing.T, topo *topology.Topology)
	}{
		{"numa of GPU 0", "dgx-h100", gputest.WithFault("GetNumaNodeId", 1, ns), func(t *testing.T, topo *topology.Topology) {
			got := []int{topo.GPUs[0].NUMANode, topo.GPUs[1].NUMANode}
			if diff := cmp.Diff([]int{-1, 0}, got); diff != "" {
				t.Errorf("NUMA (-want +got):\n%s", diff)
			}
			if !strings.Contains(topology.Render(topo), "GPU0  X     NV18  NV18  NV18  NV18  NV18  NV18  NV18  N/A\n") {
				t.Errorf("render does not show N/A NUMA:\n%s", topology.Render(topo))
			}
		}},
		{"every common ancestor", "dgx-a100-40gb", gputest.WithFaultAfter("GetTopologyCommonAncestor", 0, ns), func(t *testing.T, topo *topology.Topology) {
			if diff := cmp.Diff(uniform(8, "N/A"), pcieOf(topo)); diff != "" {
				t.Errorf("PCIe (-want +got):\n%s", diff)
			}
			// Without levels no GPUs are known to share a host bridge: one root per GPU.
			if got, want := topo.GPUs[1].PCIeRoot, "pci0000:0f"; got != want {
				t.Errorf("GPU 1 root %q, want %q", got, want)
			}
		}},
		{"no NVLink", "dgx-a100-40gb", gputest.WithFaultAfter("GetNvLinkState", 0, ns), func(t *testing.T, topo *topology.Topology) {
			if got := matrixOf(topo)[0]; got != "X PXB SYS SYS SYS SYS SYS SYS" {
				t.Errorf("row 0 %q, want the PCIe levels", got)
			}
			if topo.GPUs[0].NVLinks != 0 || topo.GPUs[0].Peers != nil {
				t.Errorf("GPU 0 NVLinks %d peers %v", topo.GPUs[0].NVLinks, topo.GPUs[0].Peers)
			}
		}},
		{"remote PCI info", "dgx-h100", gputest.WithFaultAfter("GetNvLinkRemotePciInfo", 0, ns), func(t *testing.T, topo *topology.Topology) {
			// The links are up but their far ends are unknown: counted on the GPU, not on a pair.
			if topo.GPUs[0].NVLinks != 18 || topo.Link(0, 1).NVLinks != 0 || topo.Link(0, 1).PCIe != topology.LevelNode {
				t.Errorf("GPU 0 %d links, link to GPU 1 %+v", topo.GPUs[0].NVLinks, topo.Link(0, 1))
			}
		}},
		{"fabric", "gb200-nvl4", gputest.WithFaultAfter("GetGpuFabricInfo", 0, ns), func(t *testing.T, topo *topology.Topology) {
			if topo.Domains != nil || topo.GPUs[0].Fabric != nil {
				t.Errorf("domains %+v, fabric %+v", topo.Domains, topo.GPUs[0].Fabric)
			}
		}},
		{"pci info of GPU 1", "a10gx4", gputest.WithFault("GetPciInfo", 2, ns), func(t *testing.T, topo *topology.Topology) {
			g := topo.GPUs[1]
			if g.PCIBusID != "" || g.PCIeRoot != "" || g.PCIeRootSource != topology.RootNone {
				t.Errorf("GPU 1 %+v", g)
			}
			if topo.GPUs[2].PCIeRoot != "pci0000:00" {
				t.Errorf("GPU 2 root %q", topo.GPUs[2].PCIeRoot)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, discover(t, tc.machine, tc.fault))
		})
	}
}

func TestDiscoverErrors(t *testing.T) {
	tests := []struct {
		name    string
		machine string
		fault   gputest.Option
		ret     nvml.Return
		want    nvmltopology.Error
	}{
		{"count", "dgx-h100", gputest.WithFault("DeviceGetCount", 1, nvml.ERROR_UNINITIALIZED), nvml.ERROR_UNINITIALIZED,
			nvmltopology.Error{GPU: -1, Op: "DeviceGetCount"}},
		{"handle", "dgx-h100", gputest.WithFault("DeviceGetHandleByIndex", 4, nvml.ERROR_GPU_IS_LOST), nvml.ERROR_GPU_IS_LOST,
			nvmltopology.Error{GPU: 3, Op: "DeviceGetHandleByIndex"}},
		{"uuid", "dgx-h100", gputest.WithFault("GetUUID", 2, nvml.ERROR_UNKNOWN), nvml.ERROR_UNKNOWN,
			nvmltopology.Error{GPU: 1, Op: "GetUUID"}},
		{"pci", "dgx-h100", gputest.WithFault("GetPciInfo", 8, nvml.ERROR_GPU_IS_LOST), nvml.ERROR_GPU_IS_LOST,
			nvmltopology.Error{GPU: 7, Op: "GetPciInfo"}},
		{"numa", "a30x4", gputest.WithFault("GetNumaNodeId", 3, nvml.ERROR_UNKNOWN), nvml.ERROR_UNKNOWN,
			nvmltopology.Error{GPU: 2, Op: "GetNumaNodeId"}},
		{"fabric", "gb200-nvl4", gputest.WithFault("GetGpuFabricInfo", 1, nvml.ERROR_NO_PERMISSION), nvml.ERROR_NO_PERMISSION,
			nvmltopology.Error{GPU: 0, Op: "GetGpuFabricInfo"}},
		{"nvlink state", "dgx-h100", gputest.WithFault("GetNvLinkState", 1, nvml.ERROR_GPU_IS_LOST), nvml.ERROR_GPU_IS_LOST,
			nvmltopology.Error{GPU: 0, Op: "GetNvLinkState", Arg: "link 0"}},
		{"nvlink remote", "dgx-h100", gputest.WithFault("GetNvLinkRemotePciInfo", 3, nvml.ERROR_UNKNOWN), nvml.ERROR_UNKNOWN,
			nvmltopology.Error{GPU: 0, Op: "GetNvLinkRemotePciInfo", Arg: "link 2"}},
		{"nvlink remote type", "gb200-nvl4", gputest.WithFault("GetNvLinkRemoteDeviceType", 1, nvml.ERROR_UNKNOWN), nvml.ERROR_UNKNOWN,
			nvmltopology.Error{GPU: 0, Op: "GetNvLinkRemoteDeviceType", Arg: "link 0"}},
		{"common ancestor", "l4x8", gputest.WithFault("GetTopologyCommonAncestor", 1, nvml.ERROR_GPU_IS_LOST), nvml.ERROR_GPU_IS_LOST,
			nvmltopology.Error{GPU: 0, Op: "GetTopologyCommonAncestor", Arg: "GPU 1"}},
		{"p2p", "l4x8", gputest.WithFault("GetP2PStatus", 1, nvml.ERROR_UNKNOWN), nvml.ERROR_UNKNOWN,
			nvmltopology.Error{GPU: 0, Op: "GetP2PStatus", Arg: "GPU 1, read"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := gputest.New(tc.machine, tc.fault)
			if err != nil {
				t.Fatal(err)
			}
			topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
			if err == nil {
				t.Fatalf("Discover succeeded: %+v", topo)
			}
			if !errors.Is(err, tc.ret) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.ret)
			}
			var e *nvmltopology.Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *nvmltopology.Error", err)
			}
			tc.want.Return = tc.ret
			if diff := cmp.Diff(tc.want, *e); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if !strings.Contains(err.Error(), tc.want.Op) {
				t.Errorf("message %q does not name %s", err, tc.want.Op)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		err  nvmltopology.Error
		want string
	}{
		{nvmltopology.Error{GPU: 2, Op: "GetNvLinkState", Arg: "link 3", Return: nvml.ERROR_UNKNOWN}, "topology: GPU 2: GetNvLinkState(link 3): ERROR_UNKNOWN"},
		{nvmltopology.Error{GPU: -1, Op: "DeviceGetCount", Return: nvml.ERROR_UNINITIALIZED}, "topology: DeviceGetCount: ERROR_UNINITIALIZED"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestLevelString(t *testing.T) {
	got := []string{}
	for _, l := range []topology.Level{topology.LevelUnknown, topology.LevelPIX, topology.LevelPXB, topology.LevelPHB, topology.LevelNode, topology.LevelSys, 42} {
		got = append(got, l.String())
	}
	if diff := cmp.Diff([]string{"N/A", "PIX", "PXB", "PHB", "NODE", "SYS", "Level(42)"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !(topology.LevelPIX.Rank() < topology.LevelSys.Rank() && topology.LevelSys.Rank() < topology.LevelUnknown.Rank()) {
		t.Error("Rank must order PIX < SYS < unknown")
	}
	if got := (topology.Link{NVLinks: 4, PCIe: topology.LevelSys}).String(); got != "NV4" {
		t.Errorf("Link.String() = %q", got)
	}
}

func TestTopologyJSON(t *testing.T) {
	topo := discover(t, "gb200-nvl4")
	b, err := json.Marshal(topo)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `{"nvlinks":18,"pcie":"NODE","p2p":true}`) {
		t.Errorf("JSON does not spell levels out: %s", b)
	}
	var back topology.Topology
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(topo, &back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	var l topology.Level
	if err := l.UnmarshalText([]byte("QPI")); err == nil {
		t.Error("UnmarshalText accepted QPI")
	}
	if _, err := topology.Level(9).MarshalText(); err == nil {
		t.Error("MarshalText accepted Level(9)")
	}
}

// TestDiscoverEmptyPCIInfo (issue 28, defect 5): a GPU whose PciInfo is empty, as go-nvml's
// own mock servers report it, has no bus ID and no PCIe root, rather than the host bridge's
// 0000:00:00.0.
func TestDiscoverEmptyPCIInfo(t *testing.T) {
	m, err := gputest.New("a10gx4")
	if err != nil {
		t.Fatal(err)
	}
	m.Device(1).GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS }
	topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatal(err)
	}
	if g := topo.GPUs[1]; g.PCIBusID != "" || g.PCIeRoot != "" {
		t.Errorf("GPU 1 bus ID %q, root %q; want neither", g.PCIBusID, g.PCIeRoot)
	}
	if topo.GPUs[2].PCIBusID == "" {
		t.Error("GPU 2 lost its bus ID")
	}
}

// TestGPUs: GPUs reads each GPU as Discover does (UUID, PCI bus ID, NUMA node, fabric) and
// nothing of NVLinks or pairs: with those calls failing, Discover fails and GPUs still answers.
// A failure of a call it makes is Discover's error.
func TestGPUs(t *testing.T) {
	broken := []gputest.Option{
		gputest.WithFault("GetNvLinkState", 1, nvml.ERROR_GPU_IS_LOST),
		gputest.WithFault("GetTopologyCommonAncestor", 1, nvml.ERROR_GPU_IS_LOST),
	}
	for _, name := range []string{"gb200-nvl4", "dgx-h100", "a30x4"} {
		t.Run(name, func(t *testing.T) {
			want := discover(t, name).GPUs
			for i := range want {
				want[i].PCIeRoot, want[i].PCIeRootSource, want[i].NVLinks, want[i].Peers = "", "", 0, nil
			}
			m, err := gputest.New(name, broken...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs()); err == nil {
				t.Fatal("Discover succeeded with NVLink and pair calls failing: the test would prove nothing")
			}
			got, err := nvmltopology.GPUs(m)
			if err != nil {
				t.Fatalf("GPUs: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("GPUs (-Discover's, without links and roots +GPUs):\n%s", diff)
			}
		})
	}
	m, err := gputest.New("gb200-nvl4", gputest.WithFault("GetGpuFabricInfo", 2, nvml.ERROR_NO_PERMISSION))
	if err != nil {
		t.Fatal(err)
	}
	_, err = nvmltopology.GPUs(m)
	var e *nvmltopology.Error
	if !errors.As(err, &e) || e.GPU != 1 || e.Op != "GetGpuFabricInfo" || e.Return != nvml.ERROR_NO_PERMISSION {
		t.Errorf("GPUs with GPU 1's fabric call failing: %v, want an *Error naming GPU 1 and GetGpuFabricInfo", err)
	}
}
