package sharing_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/sharing"
)

// TestPrepareCleanupOutlivesTheDeadline (defect 3): kubelet's deadline expires while Prepare
// waits for the MPS daemon. The cleanup must still run (the fake host, like
// exec.CommandContext, refuses every call under a done context) and leave the host clean.
func TestPrepareCleanupOutlivesTheDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	h := newHost()
	before := h.State()
	// The deadline expires once the daemon has been started, before Ready.
	h.SetHook(func(call string) error {
		if call == "Start "+uidU1 {
			cancel()
		}
		return nil
	})
	m := newManager(t, h)
	partial, err := m.Prepare(ctx, newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(mpsGPU, "gpu")), lookup)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Prepare error = %v, want context.Canceled", err)
	}
	if partial != nil {
		t.Errorf("partial record = %+v, want nil: everything could be undone", partial)
	}
	if diff := cmp.Diff(before, h.State()); diff != "" {
		t.Errorf("host state after the failed Prepare (-before +after):\n%s", diff)
	}
	if got := m.Registry().List(); len(got) != 0 {
		t.Errorf("registry after a fully undone Prepare = %+v, want empty", got)
	}
}

// TestPrepareReturnsWhatItCouldNotUndo (defect 3): when the undo of a failed Prepare fails
// too, the host changes left are returned as a partial record and the claim stays registered
// with it until an Undo succeeds: conflict checks see it, a retry undoes it first, and it
// survives a checkpoint and a restart.
func TestPrepareReturnsWhatItCouldNotUndo(t *testing.T) {
	for _, how := range []string{"Undo", "retried Prepare", "Undo after a restart"} {
		t.Run(how, func(t *testing.T) {
			ctx := ctxFor(t)
			h := newHost()
			before := h.State()
			h.FailOn("Ready "+uidU1, errors.New("daemon crashed"))
			h.FailOn("Stop "+uidU1, errors.New("quit refused"))
			m := newManager(t, h)
			claim := newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(mpsGPU, "gpu"))
			partial, err := m.Prepare(ctx, claim, lookup)
			if err == nil || !strings.Contains(err.Error(), "daemon crashed") || !strings.Contains(err.Error(), "quit refused") {
				t.Fatalf("Prepare error = %v, want the failure and the failed undo", err)
			}
			if partial == nil {
				t.Fatal("Prepare returned no partial record; the running daemon is recorded nowhere")
			}
			// What is left: the daemon (its Stop failed); the compute mode was restored.
			wantLeft := sharing.MPSDaemonSpec{ID: uidU1, DeviceUUIDs: []string{uuidA}}
			if len(partial.Steps) != 1 || partial.Steps[0].Action != sharing.ActionStartMPSDaemon || partial.Steps[0].Daemon == nil ||
				partial.Steps[0].Daemon.ID != wantLeft.ID || !cmp.Equal(partial.Steps[0].Daemon.DeviceUUIDs, wantLeft.DeviceUUIDs) || !partial.Partial {
				t.Fatalf("partial record steps = %+v (partial %v), want only the start of daemon u1 on %s", partial.Steps, partial.Partial, uuidA)
			}
			if _, ok := h.State().Daemons[uidU1]; !ok {
				t.Fatal("test setup: the daemon should still run")
			}
			reg, ok := m.Registry().Get(uidU1)
			if !ok || !cmp.Equal(&reg, partial) {
				t.Fatalf("registry entry of u1 = %+v, %v; want the partial record", reg, ok)
			}
			// Another claim on the device conflicts with the partial one.
			if _, err := m.Prepare(ctx, newClaim(uidU2, results(result("gpu", "gpu-0"))), lookup); err == nil || !strings.Contains(err.Error(), "conflicts with claim ns/claim-"+uidU1+" ("+uidU1+")") {
				t.Errorf("Prepare of a claim on the same device = %v, want a conflict with u1", err)
			}
			// While the undo keeps failing, a retry fails and returns the partial record again.
			again, err := m.Prepare(ctx, claim, lookup)
			if err == nil || !strings.Contains(err.Error(), "quit refused") || !cmp.Equal(again, partial) {
				t.Fatalf("retried Prepare = %+v, %v; want the partial record and the undo error", again, err)
			}

			h.FailOn("Stop "+uidU1, nil)
			switch how {
			case "Undo":
				if err := m.Undo(ctx, partial); err != nil {
					t.Fatalf("Undo of the partial record: %v", err)
				}
			case "Undo after a restart":
				m = newManager(t, h)
				if err := m.Restore([]sharing.Record{*mustRoundTrip(t, partial)}); err != nil {
					t.Fatal(err)
				}
				if err := m.Undo(ctx, partial); err != nil {
					t.Fatalf("Undo of the partial record: %v", err)
				}
			case "retried Prepare":
				h.FailOn("Ready "+uidU1, nil)
				rec, err := m.Prepare(ctx, claim, lookup)
				if err != nil || rec.Partial {
					t.Fatalf("retried Prepare = %+v, %v; want a prepared claim", rec, err)
				}
				if err := m.Undo(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(before, h.State()); diff != "" {
				t.Errorf("host state at the end (-before +after):\n%s", diff)
			}
			if got := m.Registry().List(); len(got) != 0 {
				t.Errorf("registry at the end = %+v, want empty", got)
			}
		})
	}
}

// mustRoundTrip passes a record through its JSON form, as a checkpoint does.
func mustRoundTrip(t *testing.T, rec *sharing.Record) *sharing.Record {
	t.Helper()
	var out sharing.Record
	if err := json.Unmarshal(mustJSON(t, rec), &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestShareBesideAPartialRecord: a share of a GPU whose first share's Prepare failed half-way
// (its daemon did not become ready and would not stop: a partial record) starts a daemon of its
// own, joins only the GPU's compute mode, and keeps both when the partial record is undone.
func TestShareBesideAPartialRecord(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	h.SetComputeModeState(uuidA, sharing.ComputeModeExclusiveProcess)
	before := h.State()
	m := newManager(t, h)
	first := newClaim(uidA, results(withMemory(shared(result("gpu", "gpu-0"), "s1"), "1Gi")))
	h.FailOn("Ready "+uidA, errors.New("daemon crashed"))
	h.FailOn("Stop "+uidA, errors.New("quit refused"))
	partial, err := m.Prepare(ctx, first, lookup)
	if err == nil || partial == nil {
		t.Fatalf("first Prepare = %+v, %v; want an error and a partial record", partial, err)
	}
	h.FailOn("Ready "+uidA, nil)
	h.FailOn("Stop "+uidA, nil)
	rec, err := m.Prepare(ctx, newClaim(uidB, results(withMemory(shared(result("gpu", "gpu-0"), "s2"), "1Gi"))), lookup)
	if err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	if got := rec.Devices[0].MPSDaemonID; got != uidB {
		t.Fatalf("the second share is served by daemon %q, want its own (%s)", got, uidB)
	}
	if err := m.Undo(ctx, partial); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.State().Daemons[uidB]; !ok || h.State().ComputeModes[uuidA] != sharing.ComputeModeDefault {
		t.Fatalf("undoing the partial record took the second share's daemon or compute mode: %+v", h.State())
	}
	if err := m.Undo(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, h.State()); diff != "" {
		t.Errorf("host state at the end (-before +after):\n%s", diff)
	}
}

// TestFailedUndoKeepsOnlyWhatIsLeft: the only claim on a shared GPU is unprepared; its Undo
// stops the MPS daemon but cannot restore the compute mode. The claim stays registered with
// only the compute mode step, so a second share of the GPU starts a daemon of its own instead
// of joining the stopped one, and a retried Undo of the first claim's full record (what its
// caller checkpointed) still works, before or after the second claim's.
func TestFailedUndoKeepsOnlyWhatIsLeft(t *testing.T) {
	for _, order := range [][]string{{"a", "b"}, {"b", "a"}} {
		t.Run(strings.Join(order, " then "), func(t *testing.T) {
			ctx := ctxFor(t)
			h := newHost()
			h.SetComputeModeState(uuidA, sharing.ComputeModeExclusiveProcess)
			before := h.State()
			m := newManager(t, h)
			a, err := m.Prepare(ctx, newClaim(uidA, results(withMemory(shared(result("gpu", "gpu-0"), "s1"), "16Gi"))), lookup)
			if err != nil {
				t.Fatal(err)
			}
			daemon := a.Devices[0].MPSDaemonID
			restore := "SetComputeMode " + uuidA + " EXCLUSIVE_PROCESS"
			h.FailOn(restore, errors.New("nvml: unknown error"))
			undoErr := m.Undo(ctx, a)
			if undoErr == nil || !strings.Contains(undoErr.Error(), "nvml: unknown error") {
				t.Fatalf("Undo of a = %v, want the failed compute mode restore", undoErr)
			}
			h.FailOn(restore, nil)
			if _, ok := h.State().Daemons[daemon]; ok {
				t.Fatalf("test setup: the failed Undo should have stopped daemon %s", daemon)
			}
			// Expected from a's record: only its compute mode change is still on the host.
			want := a.DeepCopy()
			want.Partial = true
			want.Steps = nil
			for _, s := range a.Steps {
				if s.Action == sharing.ActionSetComputeMode {
					want.Steps = append(want.Steps, s)
				}
			}
			got, ok := m.Registry().Get(uidA)
			if !ok {
				t.Fatal("a failed Undo forgot claim a; the compute mode it left is recorded nowhere")
			}
			if diff := cmp.Diff(want, &got); diff != "" {
				t.Errorf("registry entry of a after the failed Undo (-want +got):\n%s", diff)
			}
			var ue *sharing.UndoError
			if !errors.As(undoErr, &ue) {
				t.Fatalf("Undo's error %v is no *sharing.UndoError", undoErr)
			}
			if diff := cmp.Diff(want, ue.Left); diff != "" {
				t.Errorf("UndoError.Left, the record a caller should checkpoint (-want +got):\n%s", diff)
			}

			b, err := m.Prepare(ctx, newClaim(uidB, results(withMemory(shared(result("gpu", "gpu-0"), "s2"), "16Gi"))), lookup)
			if err != nil {
				t.Fatalf("Prepare of b: %v", err)
			}
			if _, ok := h.State().Daemons[b.Devices[0].MPSDaemonID]; !ok {
				t.Fatalf("Prepare of b succeeded, but its MPS daemon %s does not run (b joined the daemon a's Undo stopped)", b.Devices[0].MPSDaemonID)
			}
			if m.Shared(b) {
				t.Error("Shared(b) = true, but b started the daemon that no other claim holds")
			}

			recs := map[string]*sharing.Record{"a": a, "b": b}
			for _, uid := range order {
				if err := m.Undo(ctx, recs[uid]); err != nil {
					t.Fatalf("Undo of %s: %v", uid, err)
				}
			}
			if diff := cmp.Diff(before, h.State()); diff != "" {
				t.Errorf("host state at the end (-before +after):\n%s", diff)
			}
			if got := m.Registry().List(); len(got) != 0 {
				t.Errorf("registry at the end = %+v, want empty", got)
			}
		})
	}
}

// TestTimeSliceSetThatFails: nvidia-smi can be killed at the caller's deadline after it applied
// a time slice: the failed Prepare must still restore the value the GPU had before. A set that
// nvidia-smi refuses by itself (a GPU without a compute policy says "Not Supported") changed
// nothing: the failed Prepare must leave no record behind, since a restore would be refused the
// same way every time and the claim could never be released.
func TestTimeSliceSetThatFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cancel cancels the caller's context during the set, which applies the value first;
		// otherwise the set is refused before it changes anything, and so is every restore.
		cancel bool
	}{
		{name: "refused by nvidia-smi"},
		{name: "killed at the caller's cancellation after applying", cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctxFor(t))
			defer cancel()
			h := newHost()
			h.SetTimeSliceState(uuidA, 1) // not the Default, so that a restore to 0 shows too
			before := h.State()
			m := newManager(t, h)
			claim := newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(tsLong, "gpu"))
			plan, err := m.Plan(ctx, claim, lookup)
			if err != nil {
				t.Fatal(err)
			}
			set := fmt.Sprintf("SetTimeSlice %s %d", uuidA, *plan.Devices[0].TimeSlice)
			var injected error
			if tc.cancel {
				injected = fmt.Errorf("nvidia-smi: %w", context.Canceled)
				h.SetHook(func(call string) error {
					if call == set {
						cancel()
					}
					return nil
				})
				h.FailAfter(set, injected)
			} else {
				injected = errors.New("nvidia-smi: Setting compute policy is Not Supported")
				h.FailOn(set, injected)
				h.FailOn(fmt.Sprintf("SetTimeSlice %s 1", uuidA), injected)
				h.FailOn(fmt.Sprintf("SetTimeSlice %s 0", uuidA), injected)
			}
			partial, err := m.Prepare(ctx, claim, lookup)
			if !errors.Is(err, injected) {
				t.Fatalf("Prepare error = %v, want the failed set (%v)", err, injected)
			}
			if got := h.Calls(); !slices.Contains(got, set) {
				t.Fatalf("test setup: Prepare did not call %q; calls %v", set, got)
			}
			if partial != nil {
				t.Errorf("partial record = %+v, want nil: nothing is left to restore", partial)
			}
			if diff := cmp.Diff(before, h.State()); diff != "" {
				t.Errorf("host state after the failed Prepare (-before +after):\n%s", diff)
			}
			if got := m.Registry().List(); len(got) != 0 {
				t.Errorf("registry after a fully undone Prepare = %+v, want empty", got)
			}
		})
	}
}
