package reconcile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/reconcile"
)

// report stands for a plugin's reconciliation report.
type report struct{ steps []string }

func (r *report) String() string { return strings.Join(r.steps, ",") }

// TestReconcileOpening: Reconcile removes the temporary files of interrupted spec writes of its
// own kind (and reports them) before any step runs, runs every step with the locks held even
// after one fails, joins the steps' errors and releases the locks afterwards.
func TestReconcileOpening(t *testing.T) {
	dir := t.TempDir()
	writer, err := cdi.NewWriter(cdi.WithSpecDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := writer.SpecPath("6f9c1c36-0d6b-4a4e-9d1e-2f0c2a1e7b10")
	if err != nil {
		t.Fatal(err)
	}
	leftover := atomicfile.TempPrefix + filepath.Base(spec) + "-4711"
	foreign := atomicfile.TempPrefix + "example.com-accel_x.json-1" // another driver's write
	for _, name := range []string{filepath.Base(spec), leftover, foreign} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	var held bool
	lock := func() (func(), error) {
		held = true
		return func() { held = false }, nil
	}
	var removed []string
	errFirst, errSecond := errors.New("first step failed"), errors.New("second step failed")
	step := func(name string, ret error) func(context.Context, *report) error {
		return func(_ context.Context, rep *report) error {
			if !held {
				t.Errorf("step %s ran without the locks", name)
			}
			if _, err := os.Stat(filepath.Join(dir, leftover)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("step %s ran before the leftover temporary file was removed (stat: %v)", name, err)
			}
			rep.steps = append(rep.steps, name)
			return ret
		}
	}
	rep := &report{}
	err = reconcile.Reconcile(context.Background(), rep, lock, writer, &removed,
		step("a", errFirst), step("b", nil), step("c", errSecond))

	if !errors.Is(err, errFirst) || !errors.Is(err, errSecond) {
		t.Errorf("Reconcile() = %v, want both steps' errors joined", err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, rep.steps); diff != "" {
		t.Errorf("steps run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{leftover}, removed); diff != "" {
		t.Errorf("temporary files reported removed (-want +got):\n%s", diff)
	}
	if held {
		t.Error("locks still held after Reconcile returned")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{foreign, filepath.Base(spec)}
	slices.Sort(want)
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("files left in the spec directory (-want +got):\n%s", diff)
	}
}

// TestReconcileLockFails: without the locks no step runs and the error says so.
func TestReconcileLockFails(t *testing.T) {
	writer, err := cdi.NewWriter(cdi.WithSpecDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	errLock := errors.New("lock file busy")
	ran := false
	var removed []string
	err = reconcile.Reconcile(context.Background(), &report{},
		func() (func(), error) { return nil, errLock }, writer, &removed,
		func(context.Context, *report) error { ran = true; return nil })
	if !errors.Is(err, errLock) {
		t.Errorf("Reconcile() = %v, want the lock's error", err)
	}
	if ran {
		t.Error("a step ran without the locks")
	}
}
