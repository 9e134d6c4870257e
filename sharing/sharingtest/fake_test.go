package sharingtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

const gpu = "GPU-aaaaaaaa-0000-0000-0000-000000000001"

// TestHook: the hook sees every change before it is made, and only changes; its error fails
// the call and leaves the host as it was.
func TestHook(t *testing.T) {
	ctx := context.Background()
	h := sharingtest.NewFakeHost(gpu)
	var seen []string
	h.SetHook(func(call string) error {
		seen = append(seen, call)
		if call == "SetTimeSlice "+gpu+" 2" {
			return errors.New("killed")
		}
		return nil
	})
	if _, err := h.ComputeMode(ctx, gpu); err != nil {
		t.Fatal(err)
	}
	if err := h.SetComputeMode(ctx, gpu, sharing.ComputeModeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	if err := h.SetTimeSlice(ctx, gpu, 2); err == nil || err.Error() != "killed" {
		t.Fatalf("SetTimeSlice with a failing hook = %v, want killed", err)
	}
	want := []string{"SetComputeMode " + gpu + " EXCLUSIVE_PROCESS", "SetTimeSlice " + gpu + " 2"}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("hook calls (-want +got):\n%s", diff)
	}
	if got := h.State().TimeSlices[gpu]; got != 0 {
		t.Errorf("time slice after a failed call = %d, want 0", got)
	}
}

// TestCancelledContext: like exec.CommandContext, a call with a done context does nothing.
func TestCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := sharingtest.NewFakeHost(gpu)
	if err := h.SetComputeMode(ctx, gpu, sharing.ComputeModeExclusiveProcess); !errors.Is(err, context.Canceled) {
		t.Fatalf("SetComputeMode with a cancelled context = %v, want context.Canceled", err)
	}
	if got := h.State().ComputeModes[gpu]; got != sharing.ComputeModeDefault {
		t.Errorf("compute mode = %v, want DEFAULT", got)
	}
}
