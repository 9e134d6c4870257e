package draplugin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/sharing"
)

// TestRollingUpdateUnprepareThroughTheNewPod: kubelet prepares through the old plugin pod and
// unprepares through the new one, which started before the prepare. The new pod must find the
// claim and release its MIG instance and spec, not answer "unknown claim, nothing to do".
func TestRollingUpdateUnprepareThroughTheNewPod(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	c := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 2), "")
	old := e.plugin()
	e.reconcile(old)
	updated := e.plugin() // the new pod starts while the old one serves
	if _, err := prepareOne(t, old, c); err != nil {
		t.Fatal(err)
	}
	if err := unprepareOne(t, updated, c); err != nil {
		t.Fatal(err)
	}
	if got := e.MIGInstances(); len(got) != 0 {
		t.Errorf("MIG instances leaked: %v", got)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("CDI specs leaked: %v", got)
	}
}

// TestRollingUpdateCrashedPrepareThenUnprepare (random sequence seed 132): an exclusive claim's
// prepare records no intent, and the old pod crashes right after writing its spec. The new pod
// serves on without reconciling; kubelet gives up on the pod and unprepares the claim through
// it. The spec must go: the claim is not prepared, and no start will prune the spec before the
// runtime could see it.
func TestRollingUpdateCrashedPrepareThenUnprepare(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), "")
	old := e.plugin(withHooks(draplugintest.CrashAt(c.UID, 3).Hooks())) // 3: cdi-written
	e.reconcile(old)
	updated := e.plugin()
	e.reconcile(updated)
	if _, err := prepareOne(t, old, c); !errors.Is(err, draplugintest.ErrCrash) {
		t.Fatalf("prepare with a crash after the spec was written: %v, want the crash", err)
	}
	if got := e.specs(); !slices.Equal(got, []string{string(c.UID)}) {
		t.Fatalf("CDI specs after the crash = %v, want the crashed prepare's %s (the scenario needs it)", got, c.UID)
	}
	if err := unprepareOne(t, updated, c); err != nil {
		t.Fatal(err)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("CDI specs after kubelet unprepared the claim = %v, want none", got)
	}
}

// TestRollingUpdateReconcileKeepsThePeersClaim: the new pod's start-up reconciliation runs after
// the old pod prepared a claim the new pod never saw. It must keep the claim's instance and spec.
func TestRollingUpdateReconcileKeepsThePeersClaim(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	c := e.claim(gpudra.MIGDeviceClassName, migProfileOn("2g.10gb", 4), "")
	old := e.plugin()
	e.reconcile(old)
	updated := e.plugin()
	want, err := prepareOne(t, old, c)
	if err != nil {
		t.Fatal(err)
	}
	rep := e.reconcile(updated)
	if len(rep.MIGDestroyed) != 0 || len(rep.SpecsPruned) != 0 || rep.Prepared != 1 {
		t.Errorf("reconciliation of the new pod destroyed the old pod's claim: %v (destroyed %v, pruned %v)", rep, rep.MIGDestroyed, rep.SpecsPruned)
	}
	if got := e.MIGInstances(); len(got) != 1 {
		t.Errorf("MIG instances = %v, want the claim's", got)
	}
	if got := e.specs(); !slices.Contains(got, string(c.UID)) {
		t.Errorf("specs = %v, want the claim's", got)
	}
	// The new pod answers a repeated prepare from the record, as the old one would.
	got, err := prepareOne(t, updated, c)
	if err != nil || len(got) != 1 || got[0].CDIDeviceIDs[0] != want[0].CDIDeviceIDs[0] {
		t.Errorf("repeated prepare through the new pod: %v, %v", got, err)
	}
}

// TestRollingUpdateConcurrentPods prepares and unprepares claims on every GPU through two
// plugin pods at once, each claim's prepare and unprepare going to different pods, while the
// new pod reconciles. Nothing may be lost or leaked.
func TestRollingUpdateConcurrentPods(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	var claims []*resourceapi.ResourceClaim
	for i := range 8 {
		claims = append(claims, e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", i), ""))
		claims = append(claims, e.claim(gpudra.MIGDeviceClassName, migProfileOn("3g.20gb", i), ""))
	}
	pods := []*draplugin.Plugin{e.plugin(), e.plugin()}
	e.reconcile(pods[0])
	var wg sync.WaitGroup
	wg.Go(func() { e.reconcile(pods[1]) })
	for i, c := range claims {
		wg.Go(func() {
			if _, err := prepareOne(t, pods[i%2], c); err != nil {
				t.Errorf("prepare %s: %v", c.Name, err)
				return
			}
			if err := unprepareOne(t, pods[(i+1)%2], c); err != nil {
				t.Errorf("unprepare %s: %v", c.Name, err)
			}
		})
	}
	wg.Wait()
	if got := e.MIGInstances(); len(got) != 0 {
		t.Errorf("MIG instances leaked: %v", got)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("CDI specs leaked: %v", got)
	}
	rep, err := e.plugin().Reconcile(context.Background())
	if err != nil || rep.Prepared != 0 || len(rep.RolledBack) != 0 {
		t.Errorf("state after the run: %v, %v", rep, err)
	}
}

// TestReconcileWhileServing runs reconciliation again and again while claims are prepared on
// every GPU. A claim prepared while a reconciliation runs must keep its instance and spec.
func TestReconcileWhileServing(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	p := e.plugin()
	e.reconcile(p)
	var claims []*resourceapi.ResourceClaim
	for i := range 8 {
		claims = append(claims, e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", i), ""))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if rep, err := p.Reconcile(context.Background()); err != nil || len(rep.MIGDestroyed)+len(rep.SpecsPruned) > 0 {
				t.Errorf("reconciliation while serving: %v, %v (destroyed %v, pruned %v)", rep, err, rep.MIGDestroyed, rep.SpecsPruned)
			}
		}
	})
	for _, c := range claims {
		if _, err := prepareOne(t, p, c); err != nil {
			t.Error(err)
		}
	}
	close(done)
	wg.Wait()
	if got := e.MIGInstances(); len(got) != len(claims) {
		t.Errorf("MIG instances = %v, want one per claim", got)
	}
	if got := e.specs(); len(got) != len(claims) {
		t.Errorf("specs = %v, want one per claim", got)
	}
}

// TestRollingUpdateSharedSettings: each pod's sharing engine must see the claims the other pod
// prepared and unprepared, or it keeps a host setting for a claim that is gone (or drops one a
// claim still needs). Found by TestRandomSequences: a compute mode left EXCLUSIVE_PROCESS.
func TestRollingUpdateSharedSettings(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	x, y := e.plugin(), e.plugin()
	e.reconcile(x)
	e.reconcile(y)
	first := e.claim(gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig)
	if _, err := prepareOne(t, y, first); err != nil {
		t.Fatal(err)
	}
	if err := unprepareOne(t, x, first); err != nil {
		t.Fatal(err)
	}
	e.Release(first)
	second := e.claim(gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig)
	if _, err := prepareOne(t, x, second); err != nil {
		t.Fatal(err)
	}
	if err := unprepareOne(t, y, second); err != nil {
		t.Fatal(err)
	}
	if err := e.HostClean(); err != nil {
		t.Errorf("host after claims prepared and unprepared crosswise: %v", err)
	}
}

// TestRollingUpdateShareAfterACrashedFirstShare: the old pod crashes right after the first MPS
// share of a GPU started its daemon (the claim recorded as PrepareStarted), while the new pod,
// started before, serves on without reconciling. The new pod then prepares a second share of
// that GPU, which gets a daemon of its own beside the crashed claim's. With "rollback fails",
// the crashed claim's daemon cannot be stopped for now: the second share must still be
// prepared (a claim whose rollback fails must not lock every other claim out of its GPU), the
// crashed claim's unprepare fails without touching the second's daemon, and once the daemon can
// be stopped, kubelet's unprepares leave the host clean. Found by review.
func TestRollingUpdateShareAfterACrashedFirstShare(t *testing.T) {
	for _, rollbackFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "rolled back", true: "rollback fails"}[rollbackFails], func(t *testing.T) {
			e, first, second := twoShares(t)
			crash := draplugintest.CrashAt(first.UID, 2)
			old := e.plugin(withHooks(crash.Hooks()))
			e.reconcile(old)
			updated := e.plugin()
			e.reconcile(updated)
			if _, err := prepareOne(t, old, first); !errors.Is(err, draplugintest.ErrCrash) {
				t.Fatalf("prepare of the first share: %v, want the crash", err)
			}
			if seen := crash.Seen(); seen[len(seen)-1] != testhooks.CrashAfterSharingApplied {
				t.Fatalf("crashed at %v, the scenario needs %s", seen, testhooks.CrashAfterSharingApplied)
			}
			restore := "Stop " + string(first.UID)
			if rollbackFails {
				e.Host.FailOn(restore, errors.New("quit refused"))
			}
			if _, err := prepareOne(t, updated, second); err != nil {
				t.Fatalf("prepare of the second share: %v", err)
			}
			if daemons := e.Host.State().Daemons; daemons[string(second.UID)].ID == "" {
				t.Errorf("MPS daemons running after the second share's prepare: %v, want the second share's own", daemons)
			}
			if rollbackFails {
				if err := unprepareOne(t, updated, first); err == nil {
					t.Fatal("the crashed share's unprepare succeeded although its MPS daemon could not be stopped")
				}
				if daemons := e.Host.State().Daemons; daemons[string(second.UID)].ID == "" {
					t.Errorf("the crashed share's failed unprepare took the second share's daemon: running %v", daemons)
				}
			}
			e.Host.FailOn(restore, nil)
			for _, c := range []*resourceapi.ResourceClaim{first, second} { // kubelet gave up on the first
				if err := unprepareOne(t, updated, c); err != nil {
					t.Fatal(err)
				}
			}
			if err := sharesHostClean(e); err != nil {
				t.Errorf("host after both claims are gone: %v", err)
			}
			if rep := e.reconcile(e.plugin()); rep.Prepared != 0 || len(rep.RolledBack) != 0 {
				t.Errorf("a restarted plugin found %v", rep)
			}
		})
	}
}

// TestRollingUpdateShareAfterAHalfDoneUnprepare: the only share of a GPU is unprepared; its
// sharing Undo cannot stop its MPS daemon, so the unprepare fails and kubelet will retry it. The
// other pod of a rolling update then prepares a new share of that GPU, knowing the first claim
// only from the checkpoint: the new share gets a daemon of its own, and kubelet's retry of the
// first unprepare later stops the first's. Found by review (when shares had one daemon, the new
// share joined the stopped one).
func TestRollingUpdateShareAfterAHalfDoneUnprepare(t *testing.T) {
	e, first, second := twoShares(t)
	old, updated := e.plugin(), e.plugin()
	e.reconcile(old)
	e.reconcile(updated)
	if _, err := prepareOne(t, old, first); err != nil {
		t.Fatal(err)
	}
	restore := "Stop " + string(first.UID)
	e.Host.FailOn(restore, errors.New("quit refused"))
	if err := unprepareOne(t, old, first); err == nil {
		t.Fatal("unprepare succeeded although the MPS daemon could not be stopped")
	}
	e.Host.FailOn(restore, nil)
	if _, err := prepareOne(t, updated, second); err != nil {
		t.Fatal(err)
	}
	if daemons := e.Host.State().Daemons; len(daemons) != 2 || daemons[string(second.UID)].ID == "" {
		t.Errorf("the new share was prepared, but MPS daemons running: %v; want its own beside the first's", daemons)
	}
	for _, c := range []*resourceapi.ResourceClaim{first, second} { // kubelet's retry, then the second pod goes
		if err := unprepareOne(t, updated, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := sharesHostClean(e); err != nil {
		t.Errorf("host after both claims are gone: %v", err)
	}
}

// twoShares is a DGX H100 node with consumable memory and two claims, "first" and "second", of
// 2Gi of GPU 0 each: MPS shares of the GPU, with a daemon each. GPU 0 is in compute mode
// EXCLUSIVE_PROCESS, the host's own setting, which the shares change to DEFAULT (their servers
// share the GPU) and must give back: sharesHostClean checks it.
func twoShares(t *testing.T) (e *env, first, second *resourceapi.ResourceClaim) {
	t.Helper()
	e = newEnvWith(t, "dgx-h100", draplugintest.WithSliceOptions(gpudra.WithConsumableMemory(gpudra.ConsumableMemory{})))
	e.Host.SetComputeModeState(e.Inventory.GPUs[0].UUID, sharing.ComputeModeExclusiveProcess)
	share := func(name string) *resourceapi.ResourceClaim {
		c := draplugintest.Claim(name, gpudra.GPUDeviceClassName, gpuIndex(0), "")
		c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			gpudra.CapMemory: resource.MustParse("2Gi")}}
		a, err := e.Allocate(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	return e, share("first"), share("second")
}

// sharesHostClean is HostClean for a twoShares node: GPU 0 back in the host's EXCLUSIVE_PROCESS,
// everything else as HostClean wants it.
func sharesHostClean(e *env) error {
	gpu0 := e.Inventory.GPUs[0].UUID
	if got := e.Host.State().ComputeModes[gpu0]; got != sharing.ComputeModeExclusiveProcess {
		return fmt.Errorf("GPU 0 left in compute mode %s, want the host's own %s", got, sharing.ComputeModeExclusiveProcess)
	}
	e.Host.SetComputeModeState(gpu0, sharing.ComputeModeDefault)
	return e.HostClean()
}
