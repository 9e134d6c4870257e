package draplugin_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/sharing"
)

var (
	randomSequences = flag.Int("random.sequences", 0, "sequences of TestRandomSequences (default: 16, 4 with -short)")
	randomOps       = flag.Int("random.ops", 24, "operations per sequence of TestRandomSequences")
	randomSeed      = flag.Uint64("random.seed", 1, "first seed of TestRandomSequences; sequence i uses seed+i")
)

// slot is one kind of claim the random sequences use, pinned to its own GPU so that the model
// knows exactly what the host and the machine must look like.
type slot struct {
	name     string
	class    string
	selector string
	config   string
	gpu      int
	strategy string // "exclusive", "timeslice", "mps", "mig"
}

var slots = []slot{
	{"exclusive", gpudra.GPUDeviceClassName, gpuIndex(0), "", 0, "exclusive"},
	{"timeslice", gpudra.GPUDeviceClassName, gpuIndex(1), timeSlicingConfig, 1, "timeslice"},
	{"mps", gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig, 2, "mps"},
	{"mig-1g", gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 3), "", 3, "mig"},
	{"mig-3g", gpudra.MIGDeviceClassName, migProfileOn("3g.20gb", 4), "", 4, "mig"},
	{"mig-2g-mps", gpudra.MIGDeviceClassName, migProfileOn("2g.10gb", 5), `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`, 5, "mig"},
}

// presetTimeSlice is the time slice an operator set on GPU 1 before the plugin ran: a
// rollback must put it back, not reset it to the default.
const presetTimeSlice = 2

// world is one random sequence: a node, its plugin processes, and the model of what kubelet
// considers prepared.
type world struct {
	t   *testing.T
	e   *env
	rnd *rand.Rand
	log []string
	// pods are the live plugin processes (two during a rolling update).
	pods []*draplugin.Plugin
	// claims holds the claim of each slot (nil: free); prepared says kubelet got a successful
	// prepare and no successful unprepare since; pending are operations kubelet must retry.
	claims   []*resourceapi.ResourceClaim
	prepared []bool
	pending  []string // "prepare" or "unprepare" per slot, "" when none
	seq      int
	// crashNext makes the next operation stop at that crash point; crash is the armed crasher
	// every pod's hook consults.
	crashNext int
	crash     *draplugintest.Crasher
	crashes   int // plugin processes crashed so far
	// faulting is set while an injected NVML or host fault is armed.
	faulting bool
	uuids    []string
	preset   bool // GPU 1 still has presetTimeSlice as its baseline (no reboot since)
}

// TestRandomSequences runs random sequences of prepare, unprepare, crash (the plugin stopped at
// a random crash point), restart, reboot, rolling update (two plugin processes) and NVML or host
// faults against a model of what should exist, and after every operation, once kubelet's retries
// are done, checks the invariant: every claim kubelet considers prepared has its CDI spec, its MIG
// instance and its host settings, answers a repeated prepare identically, and nothing else
// exists on the node (no other spec, instance, checkpoint entry, daemon, mount or host change).
func TestRandomSequences(t *testing.T) {
	n := *randomSequences
	if n == 0 {
		n = 16
		if testing.Short() {
			n = 4
		}
	}
	failures := 0
	for i := range n {
		seed := *randomSeed + uint64(i)
		ok := t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runSequence(t, seed, *randomOps) })
		if !ok {
			failures++
			if failures >= 3 {
				t.Fatalf("stopping after %d failed sequences", failures)
			}
		}
	}
	t.Logf("random sequences: %d run, %d operations each, seeds %d..%d, %d failed", n, *randomOps, *randomSeed, *randomSeed+uint64(n)-1, failures)
}

// TestRandomSequencesRegressions replays the seeds that once failed, whatever range
// TestRandomSequences covers:
//   - 53: reconciliation at a restart met an injected fault while finishing an interrupted
//     unprepare; the plugin serves on and kubelet's retry finishes it (the model expected
//     reconciliation to succeed despite the fault);
//   - 93: a crash armed while the chosen slot was busy hit kubelet's retry after a reboot (the
//     model gave up after that one retry);
//   - 132: a prepare that records no intent crashed after writing its spec during a rolling
//     update, and kubelet's unprepare through the other pod left the spec behind (plugin defect).
func TestRandomSequencesRegressions(t *testing.T) {
	for _, seed := range []uint64{53, 93, 132} {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runSequence(t, seed, 24) })
	}
}

func runSequence(t *testing.T, seed uint64, ops int) {
	e := newEnv(t, "dgx-a100-40gb", true)
	w := &world{t: t, e: e, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		claims: make([]*resourceapi.ResourceClaim, len(slots)), prepared: make([]bool, len(slots)), pending: make([]string, len(slots)), preset: true}
	for _, g := range e.Inventory.GPUs {
		w.uuids = append(w.uuids, g.UUID)
	}
	e.Host.SetTimeSliceState(w.uuids[1], presetTimeSlice)
	w.start()
	defer func() {
		if t.Failed() {
			t.Logf("seed %d, operations:\n  %s", seed, strings.Join(w.log, "\n  "))
		}
	}()
	for range ops {
		w.step()
		w.settle()
		w.check()
		if t.Failed() {
			return
		}
	}
}

// start starts a plugin process that reconciles, as a driver's start does.
func (w *world) start() *draplugin.Plugin {
	p := w.e.plugin(withHooks(testhooks.Hooks{AfterStep: w.afterStep}))
	if rep, err := p.Reconcile(context.Background()); err != nil {
		// Start serves after a partial reconciliation: what it left (an interrupted unprepare
		// that met the fault, seed 53) is completed by kubelet's retry, which settle makes and
		// check verifies. Without an injected fault, reconciliation must succeed.
		if !w.faulting {
			w.t.Fatalf("reconcile: %v (%v)", err, rep)
		}
		w.logf("reconcile at start met the injected fault: %v", err)
	}
	w.pods = append(w.pods, p)
	return p
}

// pod picks the plugin process kubelet talks to.
func (w *world) pod() *draplugin.Plugin { return w.pods[w.rnd.IntN(len(w.pods))] }

func (w *world) step() {
	switch r := w.rnd.IntN(100); {
	case r < 40:
		w.prepareNew()
	case r < 70:
		w.unprepareOne()
	case r < 80:
		w.crashNext = 1 + w.rnd.IntN(8)
		w.logf("arm crash at point %d of the next operation", w.crashNext)
		w.prepareNew()
	case r < 85:
		w.logf("restart")
		w.pods = nil
		w.start()
	case r < 89:
		w.logf("reboot")
		if err := w.e.Reboot(); err != nil {
			w.t.Fatal(err)
		}
		w.preset = false
		w.pods = nil
		w.start()
		w.afterReboot()
	case r < 94:
		w.rollingUpdate()
	default:
		w.fault()
	}
}

func (w *world) logf(format string, args ...any) { w.log = append(w.log, fmt.Sprintf(format, args...)) }

// prepareNew prepares the claim of a free or pending slot.
// prepareNew prepares a claim of a random slot that is not prepared and returns the slot, or -1
// when that slot had nothing to prepare.
func (w *world) prepareNew() int {
	i := w.rnd.IntN(len(slots))
	if w.prepared[i] || w.pending[i] == "unprepare" {
		return -1
	}
	if w.claims[i] == nil {
		w.seq++
		s := slots[i]
		c, err := w.e.Allocate(context.Background(), draplugintest.Claim(fmt.Sprintf("%s-%d", s.name, w.seq), s.class, s.selector, s.config))
		if err != nil {
			w.t.Fatalf("allocate %s: %v", s.name, err)
		}
		w.claims[i] = c
	}
	w.prepare(i)
	return i
}

// onlyPending says whether slot i is the only one with an operation kubelet still has to retry.
func (w *world) onlyPending(i int) bool {
	for j := range slots {
		if j != i && w.pending[j] != "" {
			return false
		}
	}
	return true
}

// prepare calls prepare on a pod, crashing it when armed; kubelet retries what failed.
func (w *world) prepare(i int) {
	p, c := w.pod(), w.claims[i]
	w.armCrash(p, c)
	_, err := draplugintest.Prepare(context.Background(), p, c)
	w.logf("prepare %s: %v", c.Name, err)
	if err != nil {
		w.pending[i] = "prepare"
		if errors.Is(err, draplugintest.ErrCrash) {
			w.crashed(p)
		}
		w.maybeGiveUp(i)
		return
	}
	w.prepared[i], w.pending[i] = true, ""
}

// maybeGiveUp: after a failed prepare kubelet retries while the pod still wants to run; when
// the pod goes away first, kubelet unprepares the claim (its claim cache holds every claim it
// tried to prepare). What the failed prepare left must then be gone at once.
func (w *world) maybeGiveUp(i int) {
	if w.rnd.IntN(4) == 0 {
		w.logf("the pod goes away: kubelet unprepares %s", w.claims[i].Name)
		w.pending[i] = "unprepare"
	}
}

func (w *world) unprepareOne() {
	var candidates []int
	for i := range slots {
		if w.prepared[i] || w.pending[i] == "unprepare" {
			candidates = append(candidates, i)
		}
	}
	if len(candidates) == 0 {
		return
	}
	i := candidates[w.rnd.IntN(len(candidates))]
	if w.rnd.IntN(4) == 0 {
		w.crashNext = 1 + w.rnd.IntN(6)
		w.logf("arm crash at point %d of the next operation", w.crashNext)
	}
	w.unprepare(i)
}

func (w *world) unprepare(i int) {
	p, c := w.pod(), w.claims[i]
	w.armCrash(p, c)
	err := draplugintest.Unprepare(context.Background(), p, c)
	w.logf("unprepare %s: %v", c.Name, err)
	if err != nil {
		w.prepared[i], w.pending[i] = false, "unprepare"
		if errors.Is(err, draplugintest.ErrCrash) {
			w.crashed(p)
		}
		return
	}
	w.prepared[i], w.pending[i] = false, ""
	w.e.Release(c)
	w.claims[i] = nil
}

// armCrash makes the next operation on c stop at crashNext.
func (w *world) armCrash(_ *draplugin.Plugin, c *resourceapi.ResourceClaim) {
	w.crash = nil
	if w.crashNext == 0 {
		return
	}
	w.crash = draplugintest.CrashAt(c.UID, w.crashNext)
	w.crashNext = 0
}

// afterStep is every pod's crash hook: it asks the armed crasher, if any.
func (w *world) afterStep(point testhooks.CrashPoint, uid types.UID) error {
	if w.crash == nil {
		return nil
	}
	return w.crash.Hooks().AfterStep(point, uid)
}

// crashed removes a crashed pod; a new one starts when none is left.
func (w *world) crashed(p *draplugin.Plugin) {
	w.crashes++
	w.pods = slices.DeleteFunc(w.pods, func(q *draplugin.Plugin) bool { return q == p })
	if len(w.pods) == 0 {
		w.logf("restart after the crash")
		w.start()
	}
}

// rollingUpdate starts a second pod, or ends the update by removing the older one.
func (w *world) rollingUpdate() {
	if len(w.pods) == 2 {
		w.logf("rolling update done")
		w.pods = w.pods[1:]
		return
	}
	w.logf("rolling update starts")
	w.start()
}

// fault makes the next operation meet a failing NVML or host call.
func (w *world) fault() {
	methods := []string{"CreateGpuInstanceWithPlacement", "CreateComputeInstance", "GpuInstance.Destroy", "SetMigMode"}
	if w.rnd.IntN(2) == 0 {
		m := methods[w.rnd.IntN(len(methods))]
		w.logf("NVML fault on %s", m)
		_ = w.e.Machine.InjectFault(m, 1, nvml.ERROR_UNKNOWN)
	} else {
		calls := []string{"SetTimeSlice " + w.uuids[1] + " 3", "SetComputeMode " + w.uuids[2] + " EXCLUSIVE_PROCESS", "SetTimeSlice " + w.uuids[1] + " 2"}
		c := calls[w.rnd.IntN(len(calls))]
		w.logf("host fault on %q", c)
		w.e.Host.FailOn(c, errors.New("injected host failure"))
	}
	w.faulting = true
	if w.rnd.IntN(2) == 0 {
		crashes := w.crashes
		i := w.prepareNew()
		if i >= 0 && w.pending[i] == "prepare" && w.crashes == crashes && w.onlyPending(i) {
			// The failed prepare has returned and kubelet has not retried yet: it must have
			// left nothing (no spec, instance, host change or checkpoint entry) already now.
			w.logf("check the node right after the failed prepare of %s", w.claims[i].Name)
			w.check()
		}
	} else {
		w.unprepareOne()
	}
	w.faulting = false
	w.e.Machine.ClearFaults()
	for _, c := range []string{"SetTimeSlice " + w.uuids[1] + " 3", "SetComputeMode " + w.uuids[2] + " EXCLUSIVE_PROCESS", "SetTimeSlice " + w.uuids[1] + " 2"} {
		w.e.Host.FailOn(c, nil)
	}
}

// afterReboot: kubelet restarts the pods of prepared claims, preparing them again.
func (w *world) afterReboot() {
	for i := range slots {
		if w.prepared[i] {
			w.pending[i] = "prepare"
		}
	}
}

// settle retries what kubelet must retry until it succeeds. A crash armed for "the next
// operation" may hit kubelet's first retry when the step itself did nothing (its slot was busy),
// as after a reboot (seed 93): kubelet then retries once more on the restarted plugin, where no
// crash is armed and no fault injected, so that retry must succeed.
func (w *world) settle() {
	for i := range slots {
		for attempt := 0; w.pending[i] != "" && attempt < 2; attempt++ {
			crashes := w.crashes
			switch w.pending[i] {
			case "prepare":
				w.prepare(i)
			}
			if w.pending[i] == "unprepare" {
				w.unprepare(i)
			}
			if w.crashes == crashes {
				break // not a crash: this retry had to succeed
			}
		}
		if w.pending[i] != "" {
			w.t.Fatalf("kubelet's retry of %s of %s failed", w.pending[i], w.claims[i].Name)
		}
	}
}

// check compares the node with the model.
func (w *world) check() {
	t, e := w.t, w.e
	var wantSpecs []string
	wantHost := sharingtestState{timeSlices: map[string]int{}, computeModes: map[string]sharing.ComputeMode{}, daemons: map[string]bool{}}
	for i, u := range w.uuids {
		wantHost.timeSlices[u] = 0
		if i == 1 && w.preset {
			wantHost.timeSlices[u] = presetTimeSlice
		}
	}
	wantInstances := 0
	for i, s := range slots {
		if !w.prepared[i] {
			continue
		}
		c := w.claims[i]
		wantSpecs = append(wantSpecs, string(c.UID))
		switch {
		case s.strategy == "timeslice":
			wantHost.timeSlices[w.uuids[s.gpu]] = 3
		case s.strategy == "mps":
			wantHost.computeModes[w.uuids[s.gpu]] = sharing.ComputeModeExclusiveProcess
			wantHost.daemons[string(c.UID)] = true
		case s.strategy == "mig":
			wantInstances++
			if s.config != "" {
				wantHost.daemons[string(c.UID)] = true
				wantHost.migMPS++
			}
		}
	}
	slices.Sort(wantSpecs)
	if got := e.specs(); !cmp.Equal(got, wantSpecs, cmpEmpty) {
		t.Errorf("CDI specs %v, want those of the prepared claims %v", got, wantSpecs)
	}
	if got := e.MIGInstances(); len(got) != wantInstances {
		t.Errorf("MIG instances %v, want %d (one per prepared MIG claim)", got, wantInstances)
	}
	w.checkHost(wantHost)
	w.checkCheckpoint(wantSpecs)
}

var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return len(a) == 0 && len(b) == 0 || slices.Equal(a, b) })

type sharingtestState struct {
	timeSlices   map[string]int
	computeModes map[string]sharing.ComputeMode
	daemons      map[string]bool
	migMPS       int
}

func (w *world) checkHost(want sharingtestState) {
	st := w.e.Host.State()
	if diff := cmp.Diff(want.timeSlices, st.TimeSlices); diff != "" {
		w.t.Errorf("time slices (-want +got):\n%s", diff)
	}
	exclusiveMIG := 0
	existing := map[string]bool{} // the fake host keeps settings of MIG devices destroyed since
	if inv, err := nvmlgpu.Enumerate(context.Background(), w.e.Machine); err == nil {
		for _, g := range inv.GPUs {
			for _, m := range g.MIGDevices {
				existing[m.UUID] = true
			}
		}
	}
	for u, m := range st.ComputeModes {
		if strings.HasPrefix(u, "MIG-") {
			if m == sharing.ComputeModeExclusiveProcess && existing[u] {
				exclusiveMIG++
			}
			continue
		}
		wm, ok := want.computeModes[u]
		if !ok {
			wm = sharing.ComputeModeDefault
		}
		if m != wm {
			w.t.Errorf("compute mode of %s is %s, want %s", u, m, wm)
		}
	}
	if exclusiveMIG != want.migMPS {
		w.t.Errorf("%d MIG devices in compute mode EXCLUSIVE_PROCESS, want %d (one per prepared MIG claim under MPS)", exclusiveMIG, want.migMPS)
	}
	if got := slices.Sorted(maps.Keys(st.Daemons)); !cmp.Equal(got, slices.Sorted(maps.Keys(want.daemons)), cmpEmpty) {
		w.t.Errorf("MPS daemons %v, want %v", got, slices.Sorted(maps.Keys(want.daemons)))
	}
	if len(st.Mounts) != len(want.daemons) {
		w.t.Errorf("shm mounts %v, want one per daemon", st.Mounts)
	}
}

// checkCheckpoint checks that a fresh plugin finds exactly the prepared claims, all complete,
// and that each answers a repeated prepare with its CDI device.
func (w *world) checkCheckpoint(want []string) {
	p := w.pods[len(w.pods)-1]
	rep, err := w.e.plugin().Reconcile(context.Background())
	if err != nil || rep.Prepared != len(want) || len(rep.RolledBack)+len(rep.UnprepareFinished)+len(rep.SpecsPruned)+len(rep.MIGDestroyed) > 0 {
		w.t.Errorf("a plugin started now finds: %v, %v; want %d prepared claims and nothing to repair", rep, err, len(want))
	}
	for i := range slots {
		if !w.prepared[i] {
			continue
		}
		devs, err := draplugintest.Prepare(context.Background(), p, w.claims[i])
		if err != nil || len(devs) != 1 || !strings.HasSuffix(devs[0].CDIDeviceIDs[0], "-"+devs[0].DeviceName) {
			w.t.Errorf("repeated prepare of %s: %v, %v", w.claims[i].Name, devs, err)
		}
	}
}
