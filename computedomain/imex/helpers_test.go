package imex_test

import (
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
)

// selfIP is the address of the node under test.
var selfIP = netip.MustParseAddr("10.0.0.1")

// newIMEXDir writes a config (and a nodes file naming selfIP alone) into a new directory.
func newIMEXDir(t *testing.T) imex.IMEXConfig {
	t.Helper()
	c := imex.IMEXConfig{Dir: t.TempDir(), BindIP: selfIP}
	w := imex.NewWriter()
	if err := w.WriteConfig(c); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteNodes(c, []netip.Addr{selfIP}); err != nil {
		t.Fatal(err)
	}
	return c
}

// fastSupervisor has test-sized backoff, grace and polling.
func fastSupervisor(root string, extra ...imex.SupervisorOption) []imex.SupervisorOption {
	return append([]imex.SupervisorOption{
		imex.WithDriverRoot(root),
		imex.WithBackoff(50*time.Millisecond, 400*time.Millisecond, 10*time.Second),
		imex.WithStopGrace(2 * time.Second),
		imex.WithReadyPoll(20*time.Millisecond, 2*time.Second),
		imex.WithOutput(io.Discard),
	}, extra...)
}

// runSupervisor runs s until stop is called or the test ends; stop waits for Run to return
// (30 s at most: a Run that does not return fails the test).
func runSupervisor(t *testing.T, s *imex.Supervisor) (stop func()) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Errorf("Supervisor.Run: %v", err)
		}
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Supervisor.Run did not return 30 s after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeState reads the fake nvidia-imex's state in dir (zero before its first start).
func fakeState(t *testing.T, dir string) imextest.State {
	t.Helper()
	s, err := imextest.ReadState(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return s
}

// readFile returns a file's content.
func readFile(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
