package testhooks_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// TestCrasher stops only its claim, at its n-th point while armed, and records what it saw.
func TestCrasher(t *testing.T) {
	c := testhooks.CrashAt("a", 2)
	h := c.Hooks()
	steps := []testhooks.CrashPoint{testhooks.CrashAfterPrepareStarted, testhooks.CrashAfterCDIWritten}
	if err := h.AfterStep(steps[0], "other"); err != nil {
		t.Fatalf("another claim: %v", err)
	}
	c.Arm(false)
	if err := h.AfterStep(steps[0], "a"); err != nil {
		t.Fatalf("disarmed: %v", err)
	}
	c.Arm(true)
	if err := h.AfterStep(steps[0], "a"); err != nil {
		t.Fatalf("first point: %v", err)
	}
	if err := h.AfterStep(steps[1], "a"); !errors.Is(err, testhooks.ErrCrash) {
		t.Fatalf("second point: %v, want ErrCrash", err)
	}
	if got := c.Seen(); !slices.Equal(got, steps) {
		t.Errorf("seen %v, want %v", got, steps)
	}
	c.Reset()
	if len(c.Seen()) != 0 || h.AfterStep(steps[0], "a") != nil {
		t.Errorf("after Reset: seen %v", c.Seen())
	}
}
