package crashpoint_test

import (
	"errors"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/crashpoint"
)

// TestAtMarksTheHooksErrors: no hook or a hook that lets the step pass is no error; a hook's
// error comes back marked as a crash, still wrapping the hook's error, and other errors are not.
func TestAtMarksTheHooksErrors(t *testing.T) {
	if err := crashpoint.At(testhooks.Hooks{}, testhooks.CrashAfterCDIWritten, "u"); err != nil {
		t.Fatalf("no hook: %v", err)
	}
	stop := errors.New("stop")
	hooks := testhooks.Hooks{AfterStep: func(p testhooks.CrashPoint, uid types.UID) error {
		if p == testhooks.CrashAfterCDIWritten && uid == "u" {
			return stop
		}
		return nil
	}}
	if err := crashpoint.At(hooks, testhooks.CrashAfterPrepareStarted, "u"); err != nil {
		t.Fatalf("another point: %v", err)
	}
	err := fmt.Errorf("prepare: %w", crashpoint.At(hooks, testhooks.CrashAfterCDIWritten, "u"))
	if !crashpoint.IsCrash(err) || !errors.Is(err, stop) {
		t.Errorf("hook's error %v: IsCrash %v, wraps it %v", err, crashpoint.IsCrash(err), errors.Is(err, stop))
	}
	if crashpoint.IsCrash(stop) {
		t.Error("an unmarked error is a crash")
	}
}
