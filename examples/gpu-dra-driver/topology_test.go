package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// topoMatrix runs `topo --machine machine` and returns the cells of its first matrix by GPU
// index, and the whole output.
func topoMatrix(t *testing.T, machine string) ([][]string, string) {
	t.Helper()
	code, out, errOut := runCLI(t, "topo", "--machine", machine)
	if code != 0 {
		t.Fatalf("topo --machine %s: exit %d: %s", machine, code, errOut)
	}
	var rows [][]string
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "GPU") {
			break
		}
		rows = append(rows, f[1:len(f)-1]) // without the NUMA column
	}
	return rows, out
}

// TestTopoShowsIslands: on the A30 server of seed 004, NVLink bridges join GPUs 0-1 and 2-3;
// every other pair talks over PCIe (NODE within a socket, SYS across). topo says so, and lists
// the islands; a PCIe-only L4 server shows no NVLink at all; GB200 shows its fabric domain.
func TestTopoShowsIslands(t *testing.T) {
	rows, out := topoMatrix(t, "a30x4")
	bridged := map[[2]int]bool{{0, 1}: true, {1, 0}: true, {2, 3}: true, {3, 2}: true}
	if len(rows) != 4 {
		t.Fatalf("topo printed %d GPU rows, want 4:\n%s", len(rows), out)
	}
	for i, r := range rows {
		for j, cell := range r {
			switch {
			case i == j:
				if cell != "X" {
					t.Errorf("GPU%d-GPU%d: %s, want X", i, j, cell)
				}
			case bridged[[2]int{i, j}]:
				if !strings.HasPrefix(cell, "NV") {
					t.Errorf("GPU%d-GPU%d: %s, want NV# (NVLink bridge)", i, j, cell)
				}
			default:
				if !slices.Contains([]string{"PIX", "PXB", "PHB", "NODE", "SYS"}, cell) {
					t.Errorf("GPU%d-GPU%d: %s, want a PCIe level (no bridge)", i, j, cell)
				}
			}
		}
	}
	if !strings.Contains(out, "NVLink islands:\n  0000:17:00.0: GPU0 GPU1\n  0000:ca:00.0: GPU2 GPU3\n") {
		t.Errorf("topo does not list the two bridged pairs as islands:\n%s", out)
	}
	l4, l4out := topoMatrix(t, "l4x8")
	for i, r := range l4 {
		for j, cell := range r {
			if strings.HasPrefix(cell, "NV") {
				t.Errorf("l4x8 GPU%d-GPU%d: %s, want PCIe only", i, j, cell)
			}
		}
	}
	if strings.Contains(l4out, "NVLink islands") {
		t.Errorf("l4x8 lists NVLink islands:\n%s", l4out)
	}
	if _, gb := topoMatrix(t, "gb200-nvl4"); !strings.Contains(gb, "NVLink islands:\n  0008:01:00.0: GPU0 GPU1 GPU2 GPU3\n") || !strings.Contains(gb, "NVLink domains:\n  cluster ") {
		t.Errorf("gb200-nvl4 does not show its island and fabric domain:\n%s", gb)
	}
}

// rendered decodes `render --machine machine` the way `check --slices` reads a real node's.
func rendered(t *testing.T, machine string) *target {
	t.Helper()
	code, out, errOut := runCLI(t, "render", "--machine", machine)
	if code != 0 {
		t.Fatalf("render --machine %s: exit %d: %s", machine, code, errOut)
	}
	path := filepath.Join(t.TempDir(), machine+".yaml")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	tg, err := slicesTarget(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// gpuClaim asks for n GPUs (of index pin, when pin >= 0), constrained by attr when it is set.
func gpuClaim(uid, n int, pin int, attr string) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(n)}
	if pin >= 0 {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes['gpu.nvidia.com'].index == %d", pin)}}}
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", uid), Namespace: "default", UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", uid))},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &req}}}},
	}
	if attr != "" {
		c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{selectors.MatchAttribute(resourceapi.FullyQualifiedName(attr))}
	}
	return c
}

// TestRenderedTopologyWithRealAllocator is issue 18's acceptance: the scheduler's allocator, fed
// what `render` prints, gives a claim for n GPUs constrained with matchAttribute only GPUs of
// one group of the machine's published layout (the groups below are NVIDIA's facts, see
// docs/hardware.md), for every set of GPUs already taken; it fits exactly when some group has n
// free GPUs, and claims repeated until one fails fit as often as the free GPUs of each group
// allow.
func TestRenderedTopologyWithRealAllocator(t *testing.T) {
	cases := []struct {
		machine, attr string
		n             int
		groups        [][]int
	}{
		{"a30x4", "gpu.nvidia.com/nvlinkIsland", 2, [][]int{{0, 1}, {2, 3}}},
		{"l4x8", "resource.kubernetes.io/pcieRoot", 2, [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
		{"l4x8", "resource.kubernetes.io/numaNode", 2, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}},
		{"l4x8", "resource.kubernetes.io/numaNode", 3, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.machine, " ", tc.attr, " ", tc.n), func(t *testing.T) {
			tg := rendered(t, tc.machine)
			index := map[string]int{}
			for _, s := range tg.slices {
				for _, d := range s.Spec.Devices {
					index[d.Name] = int(*d.Attributes["index"].IntValue)
				}
			}
			gpus := len(index)
			for taken := range 1 << gpus {
				sim := simulate.New("node-1", tg.classes, tg.slices)
				uid := 0
				free := map[int]bool{}
				for i := range gpus {
					if taken&(1<<i) == 0 {
						free[i] = true
						continue
					}
					uid++
					if _, err := sim.Allocate(ctx, gpuClaim(uid, 1, i, "")); err != nil {
						t.Fatalf("taken %08b: pin GPU %d: %v", taken, i, err)
					}
				}
				want := 0
				for _, g := range tc.groups {
					k := 0
					for _, i := range g {
						if free[i] {
							k++
						}
					}
					want += k / tc.n
				}
				got := 0
				for {
					uid++
					a, err := sim.Allocate(ctx, gpuClaim(uid, tc.n, -1, tc.attr))
					if errors.Is(err, simulate.ErrUnschedulable) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					var set []int
					for _, r := range a.Status.Allocation.Devices.Results {
						set = append(set, index[r.Device])
					}
					if !inOneGroup(set, tc.groups) || len(set) != tc.n {
						t.Fatalf("taken %08b: claim %d got GPUs %v, want %d of one of %v", taken, got, set, tc.n, tc.groups)
					}
					for _, i := range set {
						if !free[i] {
							t.Fatalf("taken %08b: GPU %d allocated twice", taken, i)
						}
						free[i] = false
					}
					got++
				}
				if got != want {
					t.Errorf("taken %08b: %d claims fit, want %d", taken, got, want)
				}
			}
		})
	}
}

func inOneGroup(set []int, groups [][]int) bool {
	for _, g := range groups {
		in := true
		for _, i := range set {
			in = in && slices.Contains(g, i)
		}
		if in {
			return true
		}
	}
	return false
}

// TestRenderedDGXIslands: every GPU of a DGX sits behind the same NVSwitches, so a claim for all
// eight on one NVLink island fits on every DGX fake, and one for three does not on a30x4.
func TestRenderedDGXIslands(t *testing.T) {
	ctx := context.Background()
	for _, m := range []string{"dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200"} {
		tg := rendered(t, m)
		if _, err := simulate.New("node-1", tg.classes, tg.slices).Allocate(ctx, gpuClaim(1, 8, -1, "gpu.nvidia.com/nvlinkIsland")); err != nil {
			t.Errorf("%s: 8 GPUs on one NVLink island: %v", m, err)
		}
	}
	tg := rendered(t, "a30x4")
	if _, err := simulate.New("node-1", tg.classes, tg.slices).Allocate(ctx, gpuClaim(1, 3, -1, "gpu.nvidia.com/nvlinkIsland")); !errors.Is(err, simulate.ErrUnschedulable) {
		t.Errorf("a30x4: 3 GPUs on one NVLink island: %v, want unschedulable", err)
	}
}
