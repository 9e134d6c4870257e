package gpudra_test

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

var (
	churnFull = flag.Bool("churn.full", false, "run the full MIG churn simulation (10,000 arrivals; see docs/benchmarks.md)")
	churnSeed = flag.Uint64("churn.seed", 1, "seed of the MIG churn simulation's arrivals")
)

// churnParams describe one churn run: a pool of identical dynamic-MIG nodes and a seeded stream of
// MIG claims that arrive one per step and leave after a random lifetime.
type churnParams struct {
	Seed         uint64
	Machine      string
	Nodes        int
	GPUsPerNode  int // 0: every GPU of the machine
	Arrivals     int
	MeanLifetime float64 // steps; sets the offered load
	Mix          []profileShare
}

type profileShare struct {
	Profile string
	Weight  int
}

// churnEvent is one arrival: its profile, when it leaves and the order the scheduler tries nodes.
type churnEvent struct {
	profile   string
	departure int
	nodes     []int
}

func (p churnParams) events() []churnEvent {
	rng := rand.New(rand.NewPCG(p.Seed, 0x5eed))
	total := 0
	for _, s := range p.Mix {
		total += s.Weight
	}
	out := make([]churnEvent, p.Arrivals)
	for i := range out {
		w := rng.IntN(total)
		for _, s := range p.Mix {
			if w < s.Weight {
				out[i].profile = s.Profile
				break
			}
			w -= s.Weight
		}
		out[i].departure = i + 1 + int(rng.ExpFloat64()*p.MeanLifetime)
		out[i].nodes = rng.Perm(p.Nodes)
	}
	return out
}

// churnPolicy places the arrivals on a pool and says whether each one fit.
type churnPolicy interface {
	// place tries to allocate arrival i on the pool's nodes in the given order.
	place(i int, e churnEvent) (bool, error)
	// release frees arrival i, which place allocated.
	release(i int)
}

// runChurn feeds the event stream to a policy and returns the failed arrivals per profile.
func runChurn(p churnParams, pol churnPolicy) (map[string]int, error) {
	events := p.events()
	leave := map[int][]int{}
	failures := map[string]int{}
	for i, e := range events {
		for _, j := range leave[i] {
			pol.release(j)
		}
		delete(leave, i)
		ok, err := pol.place(i, e)
		if err != nil {
			return nil, fmt.Errorf("arrival %d (%s): %w", i, e.profile, err)
		}
		if !ok {
			failures[e.profile]++
			continue
		}
		leave[e.departure] = append(leave[e.departure], i)
	}
	return failures, nil
}

// allocatorPolicy allocates through the scheduler's allocator on each node's ResourceSlices, as
// published by the driver and optionally reordered (the naive policy).
type allocatorPolicy struct {
	nodes []*churnNode
	held  map[int]*heldClaim
	// republish rebuilds a node's slices from its inventory after every change, as a driver
	// that republishes when it creates or destroys MIG instances does.
	republish bool
	build     func(inv *gpu.Inventory) ([]*resourceapi.ResourceSlice, error)
}

type churnNode struct {
	sim    *simulate.Simulator
	inv    *gpu.Inventory
	slices []*resourceapi.ResourceSlice
	dirty  bool // the inventory changed since the slices were built
}

type heldClaim struct {
	node  int
	claim *resourceapi.ResourceClaim
}

func newAllocatorPolicy(p churnParams, inv *gpu.Inventory, republish bool, build func(*gpu.Inventory) ([]*resourceapi.ResourceSlice, error)) (*allocatorPolicy, error) {
	pol := &allocatorPolicy{held: map[int]*heldClaim{}, republish: republish, build: build}
	for range p.Nodes {
		nodeInv := cloneInventory(inv)
		sl, err := build(nodeInv)
		if err != nil {
			return nil, err
		}
		pol.nodes = append(pol.nodes, &churnNode{sim: simulate.New(testNode, selectors.DeviceClasses(""), sl), inv: nodeInv, slices: sl})
	}
	return pol, nil
}

func (pol *allocatorPolicy) place(i int, e churnEvent) (bool, error) {
	for _, n := range e.nodes {
		node := pol.nodes[n]
		if node.dirty {
			fresh, err := pol.build(node.inv)
			if err != nil {
				return false, err
			}
			if err := republishInPlace(node.slices, fresh); err != nil {
				return false, err
			}
			node.dirty = false
		}
		got, err := node.sim.Allocate(context.Background(), migClaim(i, e.profile))
		if errors.Is(err, simulate.ErrUnschedulable) {
			continue
		}
		if err != nil {
			return false, err
		}
		pol.held[i] = &heldClaim{node: n, claim: got}
		return true, pol.changed(node, got, true)
	}
	return false, nil
}

func (pol *allocatorPolicy) release(i int) {
	h := pol.held[i]
	delete(pol.held, i)
	node := pol.nodes[h.node]
	node.sim.Release(h.claim)
	if err := pol.changed(node, h.claim, false); err != nil {
		panic(err) // a device name this test allocated does not parse: a bug in the test
	}
}

// changed records the MIG instance a claim's device stands for in the node's inventory (as the
// driver would find it after prepare); the node's slices are republished, in place, before the
// next allocation on it. The GPU's MIG mode stays off in the inventory, so the full GPU stays
// published and the device set does not change, only its order (the workload has no full-GPU
// claims, and an allocated partition's counters keep the full GPU unallocatable anyway).
func (pol *allocatorPolicy) changed(node *churnNode, claim *resourceapi.ResourceClaim, add bool) error {
	if !pol.republish {
		return nil
	}
	dev := claim.Status.Allocation.Devices.Results[0].Device
	n, err := gpudra.ParseMIGDeviceName(dev)
	if err != nil {
		return err
	}
	g := gpuByMinor(node.inv, n.ParentMinor)
	if add {
		g.MIGDevices = append(g.MIGDevices, gpu.MIGDevice{UUID: "MIG-" + dev, ParentUUID: g.UUID, ParentMinor: g.Minor,
			GIProfileID: n.GIProfileID, Placement: mig.Placement{Start: n.PlacementStart}})
	} else {
		g.MIGDevices = slices.DeleteFunc(g.MIGDevices, func(m gpu.MIGDevice) bool { return m.UUID == "MIG-"+dev })
	}
	node.dirty = true
	return nil
}

// republishInPlace gives the simulator's slice objects the freshly built device order. The device
// set must be the same: only the order may change.
func republishInPlace(old, fresh []*resourceapi.ResourceSlice) error {
	if len(old) != len(fresh) {
		return fmt.Errorf("republished %d slices, had %d", len(fresh), len(old))
	}
	for i := range old {
		if len(old[i].Spec.Devices) != len(fresh[i].Spec.Devices) {
			return fmt.Errorf("republished slice %d has %d devices, had %d", i, len(fresh[i].Spec.Devices), len(old[i].Spec.Devices))
		}
		old[i].Spec = fresh[i].Spec
	}
	return nil
}

func gpuByMinor(inv *gpu.Inventory, minor int) *gpu.GPU {
	for i := range inv.GPUs {
		if inv.GPUs[i].Minor == minor {
			return &inv.GPUs[i]
		}
	}
	return nil
}

func cloneInventory(inv *gpu.Inventory) *gpu.Inventory {
	c := *inv
	c.GPUs = slices.Clone(inv.GPUs)
	for i := range c.GPUs {
		c.GPUs[i].MIGDevices = slices.Clone(c.GPUs[i].MIGDevices)
	}
	return &c
}

// naiveOrder is what a straightforward driver publishes: per GPU, each profile's placements in
// ascending order. It reorders the devices of built slices without renaming them.
func naiveOrder(m *mig.Model, sl []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	var devs []resourceapi.Device
	for _, s := range sl {
		devs = append(devs, s.Spec.Devices...)
	}
	rank := func(d resourceapi.Device) (int, int, int) {
		n, err := gpudra.ParseMIGDeviceName(d.Name)
		if err != nil {
			return 0, -1, 0 // full GPUs first
		}
		for i, p := range m.Profiles {
			if p.ID == n.GIProfileID {
				return n.ParentMinor, i, n.PlacementStart
			}
		}
		return n.ParentMinor, len(m.Profiles), n.PlacementStart
	}
	slices.SortStableFunc(devs, func(a, b resourceapi.Device) int {
		ga, pa, sa := rank(a)
		gb, pb, sb := rank(b)
		return cmp.Or(cmp.Compare(ga, gb), cmp.Compare(pa, pb), cmp.Compare(sa, sb))
	})
	k := 0
	for _, s := range sl {
		n := len(s.Spec.Devices)
		s.Spec.Devices = devs[k : k+n]
		k += n
	}
	return sl
}

// planOracle places every arrival where mig.Plan would: on each GPU of the first node (in the
// scheduler's order) where the claim fits at all, Plan places it beside the instances there, and
// the oracle takes the GPU whose placement loses the least capacity (mig.PlacementCost; ties as
// in the Builder's order: more instances, fewer free slices, lower start, lower index). With
// repack set it may also move every instance of the GPU (Plan re-plans it from scratch), a bound
// no allocator that leaves running instances alone can reach.
type planOracle struct {
	model  *mig.Model
	repack bool
	nodes  [][][]mig.Instance // node → GPU → instances
	where  map[int][2]int
	prof   map[int]string
}

func newPlanOracle(model *mig.Model, nodes, gpus int, repack bool) *planOracle {
	o := &planOracle{model: model, repack: repack, where: map[int][2]int{}, prof: map[int]string{}}
	for range nodes {
		o.nodes = append(o.nodes, make([][]mig.Instance, gpus))
	}
	return o
}

func (o *planOracle) place(i int, e churnEvent) (bool, error) {
	for _, n := range e.nodes {
		best, bestLayout := -1, []mig.Instance(nil)
		var bestRank oracleRank
		for g, cur := range o.nodes[n] {
			layout, r, ok := o.try(cur, e.profile)
			if ok && (best < 0 || r.less(bestRank)) {
				best, bestLayout, bestRank = g, layout, r
			}
		}
		if best >= 0 {
			o.nodes[n][best] = bestLayout
			o.where[i], o.prof[i] = [2]int{n, best}, e.profile
			return true, nil
		}
	}
	return false, nil
}

// oracleRank compares GPUs as the Builder's order does (see gpudra's orderPartitions): the lower
// cost, then more instances, then fewer free slices, then the lower start.
type oracleRank struct {
	cost      []int
	instances int
	free      int
	start     int
}

func (a oracleRank) less(b oracleRank) bool {
	return cmp.Or(slices.Compare(a.cost, b.cost), cmp.Compare(b.instances, a.instances), cmp.Compare(a.free, b.free),
		cmp.Compare(a.start, b.start)) < 0
}

// try returns the GPU's layout with the claim added as Plan would place it, and what that costs.
func (o *planOracle) try(cur []mig.Instance, profile string) ([]mig.Instance, oracleRank, bool) {
	free := o.model.MemorySlices
	var profiles []string
	for _, in := range cur {
		free -= in.Placement.Size
		profiles = append(profiles, in.Profile)
	}
	if !o.repack {
		placed, err := mig.Plan(o.model, cur, []string{profile})
		if err != nil {
			return nil, oracleRank{}, false
		}
		cost, _, err := mig.PlacementCost(o.model, cur, profile, *placed[0].Placement)
		if err != nil {
			return nil, oracleRank{}, false
		}
		return append(slices.Clone(cur), placed[0]), oracleRank{cost, len(cur), free, placed[0].Placement.Start}, true
	}
	placed, err := mig.Plan(o.model, nil, append(profiles, profile))
	if err != nil {
		return nil, oracleRank{}, false
	}
	last := placed[len(placed)-1]
	cost, _, err := mig.PlacementCost(o.model, placed[:len(placed)-1], profile, *last.Placement)
	if err != nil {
		return nil, oracleRank{}, false
	}
	return placed, oracleRank{cost, len(cur), free, last.Placement.Start}, true
}

func (o *planOracle) release(i int) {
	w := o.where[i]
	held := o.nodes[w[0]][w[1]]
	k := slices.IndexFunc(held, func(in mig.Instance) bool { return in.Profile == o.prof[i] })
	o.nodes[w[0]][w[1]] = slices.Delete(held, k, k+1)
	delete(o.where, i)
}

// buildWith returns a function that builds a node's dynamic-MIG slices with the given options.
func buildWith(opts ...gpudra.Option) func(*gpu.Inventory) ([]*resourceapi.ResourceSlice, error) {
	return func(inv *gpu.Inventory) ([]*resourceapi.ResourceSlice, error) {
		b := gpudra.NewBuilder(append([]gpudra.Option{gpudra.WithDynamicMIG(nil)}, opts...)...)
		res, err := b.Build(testNode, inv)
		if err != nil {
			return nil, err
		}
		return gpudra.ResourceSlices(b.DriverName(), testNode, res)
	}
}

// a100Mix is a mixed MIG workload on A100-40GB GPUs: mostly small instances, some half and
// whole GPUs.
func a100Mix() []profileShare {
	return []profileShare{
		{"1g.5gb", 35}, {"1g.5gb+me", 5}, {"1g.10gb", 10}, {"2g.10gb", 20}, {"3g.20gb", 20}, {"4g.20gb", 5}, {"7g.40gb", 5},
	}
}

type churnRow struct {
	policy    string
	failures  int
	byProfile map[string]int
	elapsed   time.Duration
}

func churnTable(t *testing.T, p churnParams) []churnRow {
	t.Helper()
	inv := inventory(t, p.Machine)
	if p.GPUsPerNode > 0 {
		inv.GPUs = inv.GPUs[:p.GPUsPerNode]
	}
	model, err := mig.Lookup(inv.GPUs[0].ProductName)
	if err != nil {
		t.Fatal(err)
	}
	published := buildWith(gpudra.WithDynamicMIGOwned(func(*gpu.GPU, *gpu.MIGDevice) bool { return true }))
	naive := func(inv *gpu.Inventory) ([]*resourceapi.ResourceSlice, error) {
		sl, err := published(inv)
		return naiveOrder(model, sl), err
	}
	type job struct {
		name string
		pol  func() (churnPolicy, error)
	}
	alloc := func(republish bool, build func(*gpu.Inventory) ([]*resourceapi.ResourceSlice, error)) func() (churnPolicy, error) {
		return func() (churnPolicy, error) { return newAllocatorPolicy(p, inv, republish, build) }
	}
	oracle := func(repack bool) func() (churnPolicy, error) {
		return func() (churnPolicy, error) { return newPlanOracle(model, p.Nodes, len(inv.GPUs), repack), nil }
	}
	jobs := []job{
		{churnNaive, alloc(false, naive)},
		{churnStatic, alloc(false, published)},
		{churnPublished, alloc(true, published)},
		{churnOracle, oracle(false)},
		{churnRepack, oracle(true)},
	}
	// The policies are independent: run them side by side.
	rows := make([]churnRow, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			start := time.Now()
			pol, err := j.pol()
			if err == nil {
				rows[i].byProfile, err = runChurn(p, pol)
			}
			for _, n := range rows[i].byProfile {
				rows[i].failures += n
			}
			rows[i].policy, rows[i].elapsed, errs[i] = j.name, time.Since(start), err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", jobs[i].name, err)
		}
	}
	return rows
}

// The policies of the churn table.
const (
	churnNaive     = "naive: ascending placements, GPU by GPU"
	churnStatic    = "published, never republished"
	churnPublished = "published, republished as GPUs fill"
	churnOracle    = "oracle: mig.Plan on every GPU"
	churnRepack    = "bound: mig.Plan re-packs the GPU"
)

// TestMIGChurn drives a pool of dynamic-MIG DGX A100 nodes with random arrivals and departures of
// mixed-profile claims through the scheduler's allocator, and compares the claim failure rate of
// the order the driver publishes with a naive ascending order and with mig.Plan as an oracle.
// The default run is small (2 nodes of 2 GPUs); -churn.full runs the 10,000-arrival version
// recorded in docs/benchmarks.md (make churn) and checks the goals there: at least 30% fewer
// failures than the naive order, and within 10% of the oracle.
func TestMIGChurn(t *testing.T) {
	p := churnParams{Seed: *churnSeed, Machine: "dgx-a100-40gb", Nodes: 2, GPUsPerNode: 2, Arrivals: 200, MeanLifetime: 9, Mix: a100Mix()}
	if testing.Short() {
		p.Arrivals = 100
	}
	if *churnFull {
		p = churnParams{Seed: *churnSeed, Machine: "dgx-a100-40gb", Nodes: 4, Arrivals: 10000, MeanLifetime: 80, Mix: a100Mix()}
	}
	rows := churnTable(t, p)
	byPolicy := map[string]int{}
	for _, r := range rows {
		byPolicy[r.policy] = r.failures
		t.Logf("| %s | %d | %.2f%% | %v | %v |", r.policy, r.failures, 100*float64(r.failures)/float64(p.Arrivals), r.byProfile, r.elapsed.Round(time.Second))
	}
	// The small default run only exercises the machinery; the goals are checked on the full run,
	// where the numbers mean something.
	pub, naive, oracle := byPolicy[churnPublished], byPolicy[churnNaive], byPolicy[churnOracle]
	if *churnFull && (10*pub > 7*naive || 10*pub > 11*oracle) {
		t.Errorf("goals missed: published %d failures, want at most 70%% of naive (%d) and 110%% of the oracle (%d)", pub, naive, oracle)
	}
}
