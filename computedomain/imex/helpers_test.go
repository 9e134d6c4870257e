package imex_test

import (
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
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

// runSupervisor runs s until the test ends (then waits for Run to return).
func runSupervisor(t *testing.T, s *imex.Supervisor) (stop func()) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Run(ctx); err != nil {
			t.Errorf("Supervisor.Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
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
