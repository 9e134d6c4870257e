package gpudra_test

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

var (
	islandsFull = flag.Bool("islands.full", false, "run the full NVLink-island claim streams (see docs/benchmarks.md)")
	islandsSeed = flag.Uint64("islands.seed", 1, "seed of the NVLink-island claim streams")
)

// islandCase is one node and the stream of GPU claims that arrives at it: one claim per step,
// sizes drawn from weights (sizes[k] GPUs with weight weights[k]), each leaving after an
// exponentially distributed lifetime.
type islandCase struct {
	name         string
	machine      string
	mopts        []gputest.Option
	sizes        []int
	weights      []int
	meanLifetime float64
}

type islandArrival struct {
	size, departure int
}

func (c islandCase) stream(seed uint64, n int) []islandArrival {
	rng := rand.New(rand.NewPCG(seed, 0x15a7d))
	total := 0
	for _, w := range c.weights {
		total += w
	}
	out := make([]islandArrival, n)
	for i := range out {
		w := rng.IntN(total)
		for k, wk := range c.weights {
			if w < wk {
				out[i].size = c.sizes[k]
				break
			}
			w -= wk
		}
		out[i].departure = i + 1 + int(rng.ExpFloat64()*c.meanLifetime)
	}
	return out
}

// islandStats counts the multi-GPU claims of a stream: arrived, allocated, given GPUs of one
// NVLink island, not allocated.
type islandStats struct {
	multi, allocated, oneIsland, failed int
}

// onIsland is the share of the allocated multi-GPU claims that got GPUs of one NVLink island.
func (s islandStats) onIsland() float64 {
	if s.allocated == 0 {
		return 0
	}
	return float64(s.oneIsland) / float64(s.allocated)
}

// allocatedShare is the share of the multi-GPU claims that arrived and were allocated.
func (s islandStats) allocatedShare() float64 {
	if s.multi == 0 {
		return 0
	}
	return float64(s.allocated) / float64(s.multi)
}

// runIslands feeds the stream to the scheduler's allocator on slices. With constrained, claims
// for several GPUs carry matchAttribute on the NVLink island; claims that do not fit are
// dropped.
func runIslands(slices []*resourceapi.ResourceSlice, stream []islandArrival, constrained bool) (islandStats, error) {
	island := map[string]string{}
	for _, d := range allDevices(slices) {
		if v, ok := strAttr(&d, gpudra.AttrNVLinkIsland); ok {
			island[d.Name] = v
		}
	}
	sim := simulate.New(testNode, selectors.DeviceClasses(""), slices)
	held := map[int]*resourceapi.ResourceClaim{}
	leave := map[int][]int{}
	var st islandStats
	for i, a := range stream {
		for _, j := range leave[i] {
			sim.Release(held[j])
			delete(held, j)
		}
		attr := ""
		if constrained && a.size > 1 {
			attr = gpudra.DefaultDriverName + "/" + string(gpudra.AttrNVLinkIsland)
		}
		if a.size > 1 {
			st.multi++
		}
		got, err := sim.Allocate(context.Background(), claimFor(i+1, a.size, "", attr))
		if errors.Is(err, simulate.ErrUnschedulable) {
			if a.size > 1 {
				st.failed++
			}
			continue
		}
		if err != nil {
			return st, fmt.Errorf("arrival %d (%d GPUs): %w", i, a.size, err)
		}
		held[i] = got
		leave[a.departure] = append(leave[a.departure], i)
		if a.size == 1 {
			continue
		}
		st.allocated++
		first := island[got.Status.Allocation.Devices.Results[0].Device]
		one := first != ""
		for _, r := range got.Status.Allocation.Devices.Results {
			one = one && island[r.Device] == first
		}
		if one {
			st.oneIsland++
		}
	}
	return st, nil
}

// indexOrder is the naive publishing order: the same devices, GPUs by index.
func indexOrder(sl []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(sl))
	for i, s := range sl {
		s = s.DeepCopy()
		slices.SortStableFunc(s.Spec.Devices, func(a, b resourceapi.Device) int {
			return cmp.Compare(gpuIndexOf(&a), gpuIndexOf(&b))
		})
		out[i] = s
	}
	return out
}

func islandCases() []islandCase {
	a30 := func(name string, mopts ...gputest.Option) islandCase {
		return islandCase{name: name, machine: "a30x4", mopts: mopts, sizes: []int{1, 2}, weights: []int{60, 40}, meanLifetime: 2}
	}
	return []islandCase{
		a30("a30x4, bridges 0-1 2-3"),
		a30("a30x4, bridges 0-2 1-3", gputest.WithNVLinkBridges([2]int{0, 2}, [2]int{1, 3})),
		a30("a30x4, bridges 0-3 1-2", gputest.WithNVLinkBridges([2]int{0, 3}, [2]int{1, 2})),
		a30("a30x4, one bridge 0-1", gputest.WithNVLinkBridges([2]int{0, 1})),
		a30("a30x4, one bridge 1-2", gputest.WithNVLinkBridges([2]int{1, 2})),
		{name: "dgx-h100", machine: "dgx-h100", sizes: []int{1, 2, 4, 8}, weights: []int{40, 30, 20, 10}, meanLifetime: 2.3},
	}
}

// TestIslandStreams measures how the publishing order (WithTopology) places multi-GPU claims
// through the scheduler's allocator, against the same devices published GPU by GPU in index
// order: the share of unconstrained multi-GPU claims that land on one NVLink island, and how
// many island-constrained ones fail. The default run is a short smoke version that checks the
// published order is never worse; -islands.full runs the streams docs/benchmarks.md reports.
func TestIslandStreams(t *testing.T) {
	arrivals := 200
	if *islandsFull {
		arrivals = 20000
	}
	for _, c := range islandCases() {
		inv, topo := inventoryAndTopology(t, c.machine, c.mopts...)
		published := slicesFor(t, inv, gpudra.WithTopology(topo))
		orders := map[string][]*resourceapi.ResourceSlice{"index": indexOrder(published), "published": published}
		stream := c.stream(*islandsSeed, arrivals)
		res := map[string][2]islandStats{}
		for name, sl := range orders {
			free, err := runIslands(sl, stream, false)
			if err != nil {
				t.Fatalf("%s, %s order: %v", c.name, name, err)
			}
			pinned, err := runIslands(sl, stream, true)
			if err != nil {
				t.Fatalf("%s, %s order: %v", c.name, name, err)
			}
			res[name] = [2]islandStats{free, pinned}
		}
		before, after := res["index"], res["published"]
		// Unconstrained: which GPUs the claims that fit got. Constrained: every allocated claim is
		// on one island, so what counts is how many fit.
		t.Logf("| %s | %d | %.1f%% | **%.1f%%** | %.1f%% | **%.1f%%** |", c.name, before[0].multi,
			100*before[0].onIsland(), 100*after[0].onIsland(), 100*before[1].allocatedShare(), 100*after[1].allocatedShare())
		// Claims that ask for an island must never do worse. Unconstrained claims may where some
		// GPUs are on no island: those come first to keep the islands for the claims that ask.
		allOnIslands := true
		for _, g := range topo.GPUs {
			allOnIslands = allOnIslands && g.NVLinks > 0
		}
		if after[1].allocatedShare() < before[1].allocatedShare() || allOnIslands && after[0].onIsland() < before[0].onIsland() {
			t.Errorf("%s: the published order does worse than the index order: unconstrained on one island %.3f vs %.3f, constrained allocated %.3f vs %.3f",
				c.name, after[0].onIsland(), before[0].onIsland(), after[1].allocatedShare(), before[1].allocatedShare())
		}
		// Where the index order splits islands or puts them first, reordering must pay off.
		if !slices.Equal(topo.Order(), seq(len(topo.GPUs))) && after[1].allocatedShare() <= before[1].allocatedShare() {
			t.Errorf("%s: the published order %v fits no more island-constrained claims than the index order (%.3f vs %.3f)",
				c.name, topo.Order(), after[1].allocatedShare(), before[1].allocatedShare())
		}
		for _, st := range []islandStats{before[1], after[1]} {
			if st.oneIsland != st.allocated {
				t.Errorf("%s: %d of %d island-constrained claims got GPUs of several islands", c.name, st.allocated-st.oneIsland, st.allocated)
			}
		}
	}
}
