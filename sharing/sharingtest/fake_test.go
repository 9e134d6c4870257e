package sharingtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// TestFailAfter: a call told to fail after its change returns the error with the host changed
// as the call succeeding would have changed it; FailOn, by contrast, changes nothing.
func TestFailAfter(t *testing.T) {
	ctx := context.Background()
	injected := errors.New("killed after applying")
	want := sharingtest.NewFakeHost(gpu) // the same changes, succeeding
	h := sharingtest.NewFakeHost(gpu)
	h.SetHook(func(call string) error {
		h.FailAfter(call, injected)
		return nil
	})
	for i, c := range changes() {
		if err := c(ctx, want); err != nil {
			t.Fatal(err)
		}
		if err := c(ctx, h); !errors.Is(err, injected) {
			t.Errorf("change %d (%s) = %v, want the injected error", i, h.Calls()[len(h.Calls())-1], err)
		}
		if diff := cmp.Diff(want.State(), h.State()); diff != "" {
			t.Fatalf("host after change %d (%s) failed after applying (-want +got):\n%s", i, h.Calls()[len(h.Calls())-1], diff)
		}
	}
	h.SetHook(nil)
	h.FailAfter("SetTimeSlice "+gpu+" 3", nil)
	if err := h.SetTimeSlice(ctx, gpu, 3); err != nil {
		t.Errorf("SetTimeSlice after FailAfter(call, nil) = %v, want nil", err)
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

// TestMain doubles the test binary as a child process that changes a persisted host and is
// killed at a hook (see TestOpenFakeHostSurvivesKill).
func TestMain(m *testing.M) {
	if path := os.Getenv("SHARINGTEST_CHILD_STATE"); path != "" {
		os.Exit(killedChild(path, os.Getenv("SHARINGTEST_CHILD_KILL_AT")))
	}
	os.Exit(m.Run())
}

// changes is a sequence of host changes through every changing call.
func changes() []func(context.Context, *sharingtest.FakeHost) error {
	spec := sharing.MPSDaemonSpec{ID: "d1", DeviceUUIDs: []string{gpu}, ShmDir: "/mps/d1/shm", ShmSizeBytes: 1 << 20}
	return []func(context.Context, *sharingtest.FakeHost) error{
		func(ctx context.Context, h *sharingtest.FakeHost) error {
			return h.SetComputeMode(ctx, gpu, sharing.ComputeModeExclusiveProcess)
		},
		func(ctx context.Context, h *sharingtest.FakeHost) error { return h.Start(ctx, spec) },
		func(ctx context.Context, h *sharingtest.FakeHost) error { return h.Mount(ctx, "/extra", 4096) },
		func(ctx context.Context, h *sharingtest.FakeHost) error { return h.SetTimeSlice(ctx, gpu, 3) },
		func(ctx context.Context, h *sharingtest.FakeHost) error { return h.Stop(ctx, spec) },
		func(ctx context.Context, h *sharingtest.FakeHost) error { return h.Unmount(ctx, "/extra") },
		func(ctx context.Context, h *sharingtest.FakeHost) error {
			return h.SetComputeMode(ctx, gpu, sharing.ComputeModeProhibited)
		},
	}
}

func killedChild(path, killAt string) int {
	n, err := strconv.Atoi(killAt)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	h, err := sharingtest.OpenFakeHost(path, gpu)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	seen := 0
	h.SetHook(func(string) error {
		if seen++; seen == n {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal arrives
		}
		return nil
	})
	for _, c := range changes() {
		if err := c(context.Background(), h); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	return 0
}

// TestOpenFakeHostSurvivesKill: a process killed (SIGKILL) at its n-th host change leaves
// exactly the first n-1 changes in the state file, as an in-memory host that made only those
// shows.
func TestOpenFakeHostSurvivesKill(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	all := changes()
	for n := 1; n <= len(all)+1; n++ {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "host.json")
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), "SHARINGTEST_CHILD_STATE="+path, "SHARINGTEST_CHILD_KILL_AT="+strconv.Itoa(n))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
			if n <= len(all) && !killed {
				t.Fatalf("child: %v, want killed at change %d; output:\n%s", err, n, out)
			}
			if n > len(all) && err != nil {
				t.Fatalf("child: %v; output:\n%s", err, out)
			}
			oracle := sharingtest.NewFakeHost(gpu)
			for _, c := range all[:n-1] {
				if err := c(context.Background(), oracle); err != nil {
					t.Fatal(err)
				}
			}
			h, err := sharingtest.OpenFakeHost(path, gpu)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(oracle.State(), h.State()); diff != "" {
				t.Errorf("state after a kill at change %d (-want +got):\n%s", n, diff)
			}
		})
	}
}

// TestOpenFakeHost: the state, HideTimeSlice included, is in the file, not in the value; a
// file for other devices and a corrupt file are errors.
func TestOpenFakeHost(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "host.json")
	h, err := sharingtest.OpenFakeHost(path, gpu)
	if err != nil {
		t.Fatal(err)
	}
	h.HideTimeSlice()
	h.SetTimeSliceState(gpu, 2)
	for _, c := range changes()[:3] {
		if err := c(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	// A writer killed between creating its temporary file and renaming it leaves it behind.
	leftover := path + ".tmp-123"
	if err := os.WriteFile(leftover, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := sharingtest.OpenFakeHost(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover temporary file still there: %v", err)
	}
	if diff := cmp.Diff(h.State(), again.State()); diff != "" {
		t.Errorf("reopened state (-want +got):\n%s", diff)
	}
	if v, known, err := again.TimeSlice(ctx, gpu); v != 2 || known || err != nil {
		t.Errorf("reopened TimeSlice = %d, %v, %v; want 2, unknown", v, known, err)
	}
	if _, err := sharingtest.OpenFakeHost(path, "GPU-other"); err == nil || !strings.Contains(err.Error(), "has devices") {
		t.Errorf("OpenFakeHost for other devices = %v, want an error", err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sharingtest.OpenFakeHost(path); err == nil {
		t.Error("OpenFakeHost of a corrupt file succeeded")
	}
	if err := h.SetComputeMode(ctx, gpu, sharing.ComputeModeDefault); err == nil {
		t.Error("a change on a corrupt state file succeeded")
	}
}

// TestOpenFakeHostShared: two hosts on one file (two plugin processes during a rolling
// update) see each other's changes and lose none when they change it concurrently.
func TestOpenFakeHostShared(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "host.json")
	a, err := sharingtest.OpenFakeHost(path, gpu)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sharingtest.OpenFakeHost(path, gpu)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	want := map[string]int64{}
	for i := range 20 {
		for name, h := range map[string]*sharingtest.FakeHost{"a": a, "b": b} {
			target := fmt.Sprintf("/%s/%d", name, i)
			want[target] = int64(i + 1)
			wg.Go(func() {
				if err := h.Mount(ctx, target, int64(i+1)); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	if diff := cmp.Diff(want, b.State().Mounts); diff != "" {
		t.Errorf("mounts seen by b (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(a.State(), b.State()); diff != "" {
		t.Errorf("a and b disagree (-a +b):\n%s", diff)
	}
}

// TestMIGComputeModeRestoredLeavesNoTrace: a MIG device the host was not built with (dynamic
// MIG created it) is in compute mode DEFAULT until set; setting it and setting it back leaves
// the state as it was, as an unprepare must (the e2e tier compares the state before and after).
// A device the host was built with keeps its entry.
func TestMIGComputeModeRestoredLeavesNoTrace(t *testing.T) {
	ctx := context.Background()
	const gpu, builtWith, created = "GPU-1", "MIG-built-with", "MIG-created"
	h := sharingtest.NewFakeHost(gpu, builtWith)
	start := h.State()
	for _, uuid := range []string{builtWith, created} {
		if err := h.SetComputeMode(ctx, uuid, sharing.ComputeModeExclusiveProcess); err != nil {
			t.Fatal(err)
		}
		if got := h.State().ComputeModes[uuid]; got != sharing.ComputeModeExclusiveProcess {
			t.Errorf("%s: compute mode %v after setting it, want EXCLUSIVE_PROCESS", uuid, got)
		}
		if err := h.SetComputeMode(ctx, uuid, sharing.ComputeModeDefault); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(start, h.State()); diff != "" {
		t.Errorf("state after setting compute modes back (-start +now):\n%s", diff)
	}
}
