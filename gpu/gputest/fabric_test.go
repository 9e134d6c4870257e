package gputest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

const cluster = "c0a8e1f4-1111-4222-8333-444455556666"

// fabricOf reads GetGpuFabricInfo of every GPU of m as Fabric values.
func fabricOf(t *testing.T, m *gputest.Machine) []gputest.Fabric {
	t.Helper()
	var out []gputest.Fabric
	for i := range m.NumGPUs() {
		d, ret := m.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU %d: %v", i, ret)
		}
		f, ret := d.GetGpuFabricInfo()
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU %d: GetGpuFabricInfo: %v", i, ret)
		}
		out = append(out, gputest.Fabric{ClusterUUID: fmt.Sprintf("%x-%x-%x-%x-%x", f.ClusterUuid[0:4], f.ClusterUuid[4:6], f.ClusterUuid[6:8], f.ClusterUuid[8:10], f.ClusterUuid[10:16]),
			CliqueID: f.CliqueId, State: nvml.GpuFabricState(f.State), Status: nvml.Return(f.Status)})
	}
	return out
}

// TestWithFabric: WithFabric sets every GPU's fabric info, WithGPUFabric one GPU's over it, and
// SetFabric changes a GPU's later; without options gb200-nvl4 keeps its default clique 1 of a
// cluster named after the machine.
func TestWithFabric(t *testing.T) {
	ready := gputest.ReadyFabric(cluster, 7)
	other := gputest.ReadyFabric(cluster, 8)
	defaultCluster := fabricOf(t, mustNewMachine(t, "gb200-nvl4"))[0].ClusterUUID
	for _, tc := range []struct {
		name string
		opts []gputest.Option
		want []gputest.Fabric
	}{
		{"default", nil, []gputest.Fabric{
			gputest.ReadyFabric(defaultCluster, 1), gputest.ReadyFabric(defaultCluster, 1),
			gputest.ReadyFabric(defaultCluster, 1), gputest.ReadyFabric(defaultCluster, 1)}},
		{"every GPU", []gputest.Option{gputest.WithFabric(ready)}, []gputest.Fabric{ready, ready, ready, ready}},
		{"one GPU still registering", []gputest.Option{gputest.WithFabric(ready), gputest.WithGPUFabric(2, ready.InProgress())},
			[]gputest.Fabric{ready, ready, {ClusterUUID: cluster, CliqueID: 7, State: nvml.GPU_FABRIC_STATE_IN_PROGRESS, Status: nvml.ERROR_NOT_READY}, ready}},
		{"one GPU failed, one in another clique", []gputest.Option{gputest.WithGPUFabric(0, ready.Failed(nvml.ERROR_UNKNOWN)), gputest.WithGPUFabric(3, other)},
			[]gputest.Fabric{{ClusterUUID: cluster, CliqueID: 7, State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: nvml.ERROR_UNKNOWN},
				gputest.ReadyFabric(defaultCluster, 1), gputest.ReadyFabric(defaultCluster, 1), other}},
		{"no cluster", []gputest.Option{gputest.WithFabric(gputest.Fabric{State: nvml.GPU_FABRIC_STATE_NOT_STARTED, Status: nvml.SUCCESS})},
			[]gputest.Fabric{
				{ClusterUUID: "00000000-0000-0000-0000-000000000000", State: nvml.GPU_FABRIC_STATE_NOT_STARTED},
				{ClusterUUID: "00000000-0000-0000-0000-000000000000", State: nvml.GPU_FABRIC_STATE_NOT_STARTED},
				{ClusterUUID: "00000000-0000-0000-0000-000000000000", State: nvml.GPU_FABRIC_STATE_NOT_STARTED},
				{ClusterUUID: "00000000-0000-0000-0000-000000000000", State: nvml.GPU_FABRIC_STATE_NOT_STARTED}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNewMachine(t, "gb200-nvl4", tc.opts...)
			if diff := cmp.Diff(tc.want, fabricOf(t, m)); diff != "" {
				t.Errorf("fabric info (-want +got):\n%s", diff)
			}
		})
	}

	m := mustNewMachine(t, "gb200-nvl4", gputest.WithFabric(ready.InProgress()))
	if err := m.SetFabric(1, ready); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ready, fabricOf(t, m)[1]); diff != "" {
		t.Errorf("after SetFabric (-want +got):\n%s", diff)
	}
}

func mustNewMachine(t *testing.T, name string, opts ...gputest.Option) *gputest.Machine {
	t.Helper()
	m, err := gputest.New(name, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return m
}

// TestFabricErrors: fabric options on a machine without a fabric, a GPU out of range and a
// cluster UUID that is not one are refused with what was wrong.
func TestFabricErrors(t *testing.T) {
	ready := gputest.ReadyFabric(cluster, 1)
	for _, tc := range []struct {
		name, machine string
		opts          []gputest.Option
		want          string
	}{
		{"no fabric", "dgx-h100", []gputest.Option{gputest.WithFabric(ready)}, "the GPUs of dgx-h100 are on no NVLink fabric"},
		{"GPU out of range", "gb200-nvl4", []gputest.Option{gputest.WithGPUFabric(4, ready)}, "WithGPUFabric(4): gb200-nvl4 has GPUs 0..3"},
		{"bad cluster", "gb200-nvl4", []gputest.Option{gputest.WithFabric(gputest.ReadyFabric("rack-a", 1))}, `WithFabric: ClusterUUID "rack-a" is not a UUID`},
		{"bad cluster of a GPU", "gb200-nvl4", []gputest.Option{gputest.WithGPUFabric(1, gputest.ReadyFabric("x", 1))}, `WithGPUFabric(1): ClusterUUID "x" is not a UUID`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := gputest.New(tc.machine, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if err := mustNewMachine(t, "dgx-h100").SetFabric(0, ready); err == nil || !strings.Contains(err.Error(), "on no NVLink fabric") {
		t.Errorf("SetFabric on dgx-h100: %v", err)
	}
	if err := mustNewMachine(t, "gb200-nvl4").SetFabric(-1, ready); err == nil || !strings.Contains(err.Error(), "has GPUs 0..3") {
		t.Errorf("SetFabric(-1): %v", err)
	}
}

// TestNVLDomain: the default domain is 18 nodes in two cliques of 9 consecutive nodes, one
// cluster per domain name; uneven splits stay contiguous; bad counts are refused; and a
// machine built from a node's options is discovered in the node's clique.
func TestNVLDomain(t *testing.T) {
	type summary struct {
		Nodes   int
		Cliques map[uint32][]string
	}
	summarize := func(nodes []gputest.DomainNode) summary {
		s := summary{Nodes: len(nodes), Cliques: map[uint32][]string{}}
		for _, n := range nodes {
			s.Cliques[n.Fabric.CliqueID] = append(s.Cliques[n.Fabric.CliqueID], n.Name)
		}
		return s
	}
	for _, tc := range []struct {
		nodes, cliques int
		want           summary
	}{
		{0, 0, summary{18, map[uint32][]string{
			1: {"rack-00", "rack-01", "rack-02", "rack-03", "rack-04", "rack-05", "rack-06", "rack-07", "rack-08"},
			2: {"rack-09", "rack-10", "rack-11", "rack-12", "rack-13", "rack-14", "rack-15", "rack-16", "rack-17"}}}},
		{5, 2, summary{5, map[uint32][]string{1: {"rack-00", "rack-01", "rack-02"}, 2: {"rack-03", "rack-04"}}}},
		{3, 3, summary{3, map[uint32][]string{1: {"rack-00"}, 2: {"rack-01"}, 3: {"rack-02"}}}},
		{2, 1, summary{2, map[uint32][]string{1: {"rack-00", "rack-01"}}}},
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.nodes, tc.cliques), func(t *testing.T) {
			nodes, err := gputest.NVLDomain("rack", tc.nodes, tc.cliques)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, summarize(nodes)); diff != "" {
				t.Errorf("domain (-want +got):\n%s", diff)
			}
			for _, n := range nodes {
				if n.Fabric.ClusterUUID != nodes[0].Fabric.ClusterUUID || n.Fabric.State != nvml.GPU_FABRIC_STATE_COMPLETED || n.Fabric.Status != nvml.SUCCESS {
					t.Errorf("node %s: fabric %+v, want registered in cluster %s", n.Name, n.Fabric, nodes[0].Fabric.ClusterUUID)
				}
			}
		})
	}

	a, _ := gputest.NVLDomain("rack-a", 2, 1)
	again, _ := gputest.NVLDomain("rack-a", 2, 1)
	b, _ := gputest.NVLDomain("rack-b", 2, 1)
	if a[0].Fabric.ClusterUUID != again[0].Fabric.ClusterUUID || a[0].Fabric.ClusterUUID == b[0].Fabric.ClusterUUID {
		t.Errorf("clusters: rack-a %s, again %s, rack-b %s; want one per name, stable", a[0].Fabric.ClusterUUID, again[0].Fabric.ClusterUUID, b[0].Fabric.ClusterUUID)
	}

	for _, bad := range []struct {
		name           string
		nodes, cliques int
		want           string
	}{
		{"", 2, 1, "empty domain name"},
		{"r", -1, 1, "negative count"},
		{"r", 2, 3, "more cliques than nodes"},
	} {
		if _, err := gputest.NVLDomain(bad.name, bad.nodes, bad.cliques); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("NVLDomain(%q, %d, %d): %v, want %q", bad.name, bad.nodes, bad.cliques, err, bad.want)
		}
	}

	nodes, err := gputest.NVLDomain("rack", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []gputest.DomainNode{nodes[0], nodes[17]} {
		topo, err := nvmltopology.Discover(mustNewMachine(t, "gb200-nvl4", n.Options()...), nvmltopology.WithoutSysfs())
		if err != nil {
			t.Fatal(err)
		}
		if len(topo.Domains) != 1 || topo.Domains[0].DomainID() != n.CliqueID() || len(topo.Domains[0].GPUs) != 4 {
			t.Errorf("node %s: discovered domains %+v, want its 4 GPUs in %s", n.Name, topo.Domains, n.CliqueID())
		}
	}
	notReady := nodes[1]
	notReady.Fabric = notReady.Fabric.InProgress()
	topo, err := nvmltopology.Discover(mustNewMachine(t, "gb200-nvl4", notReady.Options()...), nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Domains) != 0 {
		t.Errorf("a node still registering is discovered in domains %+v, want none", topo.Domains)
	}
}

// A rack of four trays in two cliques; the third tray's fabric registration has not completed,
// so its GPUs are in no clique yet.
func ExampleNVLDomain() {
	nodes, err := gputest.NVLDomain("rack-a", 4, 2)
	if err != nil {
		panic(err)
	}
	nodes[2].Fabric = nodes[2].Fabric.InProgress()
	for _, n := range nodes {
		m, err := gputest.New("gb200-nvl4", n.Options()...)
		if err != nil {
			panic(err)
		}
		topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
		if err != nil {
			panic(err)
		}
		fmt.Println(n.Name, "clique", n.Fabric.CliqueID, "domains found:", len(topo.Domains))
	}
	// Output:
	// rack-a-00 clique 1 domains found: 1
	// rack-a-01 clique 1 domains found: 1
	// rack-a-02 clique 2 domains found: 0
	// rack-a-03 clique 2 domains found: 1
}
