package sharing_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

// blockOn makes the host block the call named call until the returned release is called;
// entered is closed when the call has started blocking.
func blockOn(h *sharingtest.FakeHost, call string) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.SetHook(func(c string) error {
		if c == call {
			once.Do(func() { close(in) })
			<-out
		}
		return nil
	})
	var rel sync.Once
	return in, func() { rel.Do(func() { close(out) }) }
}

type outcome struct {
	rec *sharing.Record
	err error
}

func prepareAsync(ctx context.Context, m *sharing.Manager, claim *resourceapi.ResourceClaim) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		rec, err := m.Prepare(ctx, claim, lookup)
		ch <- outcome{rec, err}
	}()
	return ch
}

// TestOtherGPUsDoNotWait (defect 9): while an MPS daemon start on GPU 2 is stuck, claims on
// other GPUs are prepared and undone.
func TestOtherGPUsDoNotWait(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	m := newManager(t, h)
	entered, release := blockOn(h, "Start "+uidU2)
	defer release()
	stuck := prepareAsync(ctx, m, newClaim(uidU2, results(result("gpu", "gpu-2")), claimCfg(mpsGPU, "gpu")))
	<-entered

	done := make(chan error, 1)
	go func() {
		rec, err := m.Prepare(ctx, newClaim(uidU0, results(result("gpu", "gpu-0")), claimCfg(tsLong, "gpu")), lookup)
		if err == nil {
			err = m.Undo(ctx, rec)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("claim on GPU 0: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a claim on GPU 0 waits for an MPS daemon start on GPU 2")
	}
	release()
	if o := <-stuck; o.err != nil {
		t.Fatalf("claim on GPU 2: %v", o.err)
	}
}

// TestSameGPUSerialized (defect 9): a claim that shares a physical GPU with a claim being
// prepared waits for it, so that the conflict check sees it: an exclusive claim on GPU 2 (or
// on one of its MIG devices) is refused while a claim on that GPU is still starting its daemon.
func TestSameGPUSerialized(t *testing.T) {
	tests := []struct {
		name          string
		first, second *resourceapi.ResourceClaim
		block         string
		wantErr       string
	}{
		{
			name:    "same device",
			first:   newClaim(uidA, results(withMemory(shared(result("gpu", "gpu-2"), "s1"), "1Gi"))),
			second:  newClaim(uidB, results(result("gpu", "gpu-2"))),
			block:   "Start shared-",
			wantErr: "the device is allocated to both claims, but not as a shared device",
		},
		{
			name:    "MIG device and its GPU",
			first:   newClaim(uidA, results(result("mig", "gpu-2-mig-1g5gb-0")), claimCfg(mpsMIG, "mig")),
			second:  newClaim(uidB, results(result("gpu", "gpu-2"))),
			block:   "Start " + uidA,
			wantErr: "a GPU used whole cannot also serve one of its MIG devices",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxFor(t)
			h := newHost()
			m := newManager(t, h)
			plan, err := m.Plan(ctx, tt.first, lookup)
			if err != nil {
				t.Fatal(err)
			}
			block := tt.block
			if strings.HasSuffix(block, "-") {
				block = "Start " + plan.Devices[0].MPSDaemonID
			}
			entered, release := blockOn(h, block)
			defer release()
			first := prepareAsync(ctx, m, tt.first)
			<-entered
			second := prepareAsync(ctx, m, tt.second)
			// Whether or not the second claim waits, it ends; give it the chance to run first.
			time.Sleep(50 * time.Millisecond)
			release()
			a, b := <-first, <-second
			if a.err != nil {
				t.Fatalf("first claim: %v", a.err)
			}
			if b.err == nil || !strings.Contains(b.err.Error(), tt.wantErr) {
				t.Fatalf("second claim = %v, want a conflict: %s", b.err, tt.wantErr)
			}
		})
	}
}

// TestConcurrentSharedClaims: many claims sharing GPU 0 through its MPS daemon and GPU 1 by
// time-slicing, prepared and undone concurrently: one daemon start per busy period, and the
// host is back to its first state at the end (run with -race).
func TestConcurrentSharedClaims(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	before := h.State()
	m := newManager(t, h)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				uid := fmt.Sprintf("00000000-0000-4000-8000-%06d%06d", w, i)
				var claim *resourceapi.ResourceClaim
				if w%2 == 0 {
					claim = newClaim(uid, results(withMemory(shared(result("gpu", "gpu-0"), uid), "1Gi")))
				} else {
					claim = newClaim(uid, results(shared(result("gpu", "gpu-1"), uid)), claimCfg(tsShort, "gpu"))
				}
				rec, err := m.Prepare(ctx, claim, lookup)
				if err == nil {
					err = m.Undo(ctx, rec)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if diff := cmp.Diff(before, h.State()); diff != "" {
		t.Errorf("host state at the end (-before +after):\n%s", diff)
	}
}
