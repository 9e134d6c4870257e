package imex_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
)

// TestSupervisor runs nvidia-imex (the fake, from one driver root built for all subtests)
// under a Supervisor.
func TestSupervisor(t *testing.T) {
	root := imextest.NewDriverRoot(t)
	for _, tc := range []struct {
		name string
		test func(*testing.T, string)
	}{
		{"restarts a killed nvidia-imex", testRestartsKilledIMEX},
		{"backoff", testBackoff},
		{"restart request", testRestartRequest},
		{"stop", testStop},
		{"bad config", testBadConfig},
		{"missing binary", testMissingBinary},
		{"never ready", testNeverReady},
		{"ready failure threshold", testReadyFailureThreshold},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, root) })
	}
}

// testRestartsKilledIMEX: nvidia-imex killed with SIGKILL is started again; the
// state goes not ready while it is down and ready again with the new process.
func testRestartsKilledIMEX(t *testing.T, root string) {
	c := newIMEXDir(t)
	s := imex.NewSupervisor(c.ConfigPath(), fastSupervisor(root)...)
	runSupervisor(t, s)
	waitFor(t, 10*time.Second, "the first nvidia-imex to be ready", func() bool { return s.State().Ready })
	first := s.State()
	if got := fakeState(t, c.Dir); got.PID != first.PID || got.Starts != 1 {
		t.Fatalf("fake state %+v, want PID %d after one start", got, first.PID)
	}
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a second nvidia-imex to be ready", func() bool {
		st := s.State()
		return st.Ready && st.PID != first.PID
	})
	got := s.State()
	if got.Starts != 2 || !strings.Contains(got.LastExit, "signal: killed") {
		t.Errorf("state after the kill: %+v, want Starts 2 and LastExit saying it was killed", got)
	}
	if fs := fakeState(t, c.Dir); fs.Starts != 2 || fs.PID != got.PID {
		t.Errorf("fake state %+v, want 2 starts, PID %d", fs, got.PID)
	}
}

// testBackoff: immediate exits are retried after a backoff that doubles up to its cap; runs
// that last longer than the reset time are retried after the first backoff each time. The
// backoff the Supervisor reports after each exit is checked exactly; the fake's start times
// show that it really waited that long (and not absurdly longer).
func testBackoff(t *testing.T, root string) {
	const initial, maximum = 50 * time.Millisecond, 200 * time.Millisecond
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		faults imextest.Faults
		reset  time.Duration
		// want is the backoff after the exit of start 1, 2, ...
		want []time.Duration
	}{{
		name:   "immediate exits double the backoff up to the cap",
		faults: imextest.Faults{ExitCode: 3},
		reset:  10 * time.Second,
		want:   []time.Duration{50 * ms, 100 * ms, 200 * ms, 200 * ms},
	}, {
		name:   "runs longer than the reset time keep the first backoff",
		faults: imextest.Faults{DieAfter: 150 * ms},
		reset:  100 * ms,
		want:   []time.Duration{50 * ms, 50 * ms, 50 * ms, 50 * ms},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newIMEXDir(t)
			if err := imextest.WriteFaults(c.Dir, tc.faults); err != nil {
				t.Fatal(err)
			}
			s := imex.NewSupervisor(c.ConfigPath(), fastSupervisor(root, imex.WithBackoff(initial, maximum, tc.reset))...)
			seen := watchBackoff(s)
			stop := runSupervisor(t, s)
			waitFor(t, 20*time.Second, "five starts", func() bool { return fakeState(t, c.Dir).Starts >= len(tc.want)+1 })
			stop()
			got := seen()
			for start, want := range tc.want {
				if b, ok := got[start+1]; ok && b != want {
					t.Errorf("backoff after start %d = %v, want %v", start+1, b, want)
				}
			}
			if len(got) < 2 {
				t.Errorf("saw the backoff after %d exits only (%v); the test checks too little", len(got), got)
			}
			times := fakeState(t, c.Dir).StartTimes
			for i, want := range tc.want {
				lo := want + tc.faults.DieAfter
				if gap := times[i+1].Sub(times[i]); gap < lo || gap > lo+2*time.Second {
					t.Errorf("gap between start %d and %d = %v, want %v to %v", i+1, i+2, gap, lo, lo+2*time.Second)
				}
			}
			if st := s.State(); tc.faults.ExitCode != 0 && !strings.Contains(st.LastExit, "exit status 3: fake nvidia-imex: exiting with code 3 (injected fault)") {
				t.Errorf("LastExit = %q, want the exit status and the fake's message", st.LastExit)
			}
		})
	}
}

// watchBackoff records the backoff s reports after each exit, by the number of starts so far,
// until the returned function is called.
func watchBackoff(s *imex.Supervisor) func() map[int]time.Duration {
	seen := map[int]time.Duration{}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-s.Changed():
				if st := s.State(); st.Backoff > 0 {
					seen[st.Starts] = st.Backoff
				}
			}
		}
	}()
	return func() map[int]time.Duration {
		close(done)
		<-finished
		return seen
	}
}

// testRestartRequest: Restart stops the running nvidia-imex with SIGTERM and starts it
// again at once, with no backoff.
func testRestartRequest(t *testing.T, root string) {
	c := newIMEXDir(t)
	s := imex.NewSupervisor(c.ConfigPath(), fastSupervisor(root, imex.WithBackoff(5*time.Second, 5*time.Second, time.Minute))...)
	runSupervisor(t, s)
	waitFor(t, 10*time.Second, "nvidia-imex to be ready", func() bool { return s.State().Ready })
	first := s.State().PID
	s.Restart()
	waitFor(t, 3*time.Second, "a restarted nvidia-imex to be ready (sooner than the 5 s backoff)", func() bool {
		st := s.State()
		return st.Ready && st.PID != first
	})
	if log := readFile(t, c.Dir, imex.LogFile); !strings.Contains(log, "stopping on terminated") {
		t.Errorf("nvidia-imex's log does not show a SIGTERM stop:\n%s", log)
	}
}

// testStop: the end of Run's context stops nvidia-imex with SIGTERM, or with SIGKILL
// after the grace period when it ignores SIGTERM; Run returns only once it is gone.
func testStop(t *testing.T, root string) {
	for _, tc := range []struct {
		name          string
		ignoreSIGTERM bool
		minStop       time.Duration
	}{
		{name: "SIGTERM", minStop: 0},
		{name: "SIGKILL after the grace period", ignoreSIGTERM: true, minStop: 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newIMEXDir(t)
			if err := imextest.WriteFaults(c.Dir, imextest.Faults{IgnoreSIGTERM: tc.ignoreSIGTERM}); err != nil {
				t.Fatal(err)
			}
			s := imex.NewSupervisor(c.ConfigPath(), fastSupervisor(root, imex.WithStopGrace(500*time.Millisecond))...)
			stop := runSupervisor(t, s)
			waitFor(t, 10*time.Second, "nvidia-imex to be ready", func() bool { return s.State().Ready })
			pid := s.State().PID
			began := time.Now()
			stopped := make(chan struct{})
			go func() { stop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(tc.minStop + 5*time.Second):
				t.Fatalf("Run did not return %v after its context ended", tc.minStop+5*time.Second)
			}
			took := time.Since(began)
			if imextest.Alive(pid) {
				t.Errorf("nvidia-imex (pid %d) still runs after Run returned", pid)
			}
			if took < tc.minStop || took > tc.minStop+2*time.Second {
				t.Errorf("stopping took %v, want %v to %v", took, tc.minStop, tc.minStop+2*time.Second)
			}
			if st := s.State(); st.Running || st.Ready {
				t.Errorf("state after Run returned: %+v, want neither running nor ready", st)
			}
		})
	}
}

// testBadConfig: nvidia-imex refusing its config or nodes file is retried, and the
// state says why it ended, naming the file and the problem.
func testBadConfig(t *testing.T, root string) {
	for _, tc := range []struct {
		name, file, content, want string
	}{
		{name: "unknown key", file: imex.ConfigFile, content: "DAEMONIZE=0\nNO_SUCH_KEY=1\n", want: `line 2: unknown key "NO_SUCH_KEY"`},
		{name: "daemonizing", file: imex.ConfigFile, content: "DAEMONIZE=1\n", want: `DAEMONIZE="1": must be 0`},
		{name: "nodes file without this node", file: imex.NodesFile, content: "10.0.0.2\n", want: "BIND_INTERFACE_IP 10.0.0.1 is not among [10.0.0.2]"},
		{name: "nodes file with a bad address", file: imex.NodesFile, content: "10.0.0.1\nnode-b\n", want: `line 2: "node-b" is not an IP address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newIMEXDir(t)
			if err := os.WriteFile(filepath.Join(c.Dir, tc.file), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			s := imex.NewSupervisor(c.ConfigPath(), fastSupervisor(root)...)
			runSupervisor(t, s)
			waitFor(t, 10*time.Second, "nvidia-imex to exit", func() bool { return s.State().LastExit != "" })
			if got := s.State().LastExit; !strings.Contains(got, "exit status 1") || !strings.Contains(got, tc.want) {
				t.Errorf("LastExit = %q, want exit status 1 and %q", got, tc.want)
			}
			if s.State().Ready {
				t.Error("ready with a bad config")
			}
		})
	}
}

// testMissingBinary: a driver root without nvidia-imex is retried with backoff and
// reported, not a crash.
func testMissingBinary(t *testing.T, _ string) {
	c := newIMEXDir(t)
	root := t.TempDir()
	s := imex.NewSupervisor(c.ConfigPath(), fastSupervisor(root)...)
	runSupervisor(t, s)
	waitFor(t, 5*time.Second, "the failed start to be reported", func() bool { return s.State().LastExit != "" })
	if got := s.State().LastExit; !strings.Contains(got, "driver root "+root) {
		t.Errorf("LastExit = %q, want it to name the driver root", got)
	}
}

// testNeverReady: a running nvidia-imex that nvidia-imex-ctl does not call READY is not ready.
func testNeverReady(t *testing.T, root string) {
	c := newIMEXDir(t)
	if err := imextest.WriteFaults(c.Dir, imextest.Faults{NeverReady: true}); err != nil {
		t.Fatal(err)
	}
	s := imex.NewSupervisor(c.ConfigPath(), fastSupervisor(root)...)
	runSupervisor(t, s)
	waitFor(t, 10*time.Second, "nvidia-imex to run", func() bool { return s.State().Running })
	// Many polls (every 20 ms) later it is still not ready.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if st := s.State(); st.Ready || !st.Running {
			t.Fatalf("state %+v, want running and not ready", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testReadyFailureThreshold: a ready nvidia-imex stays ready through fewer failed queries in a
// row than the threshold (the state does not change at all), turns not ready at the threshold,
// and is ready again with the next READY, which also starts the count afresh.
func testReadyFailureThreshold(t *testing.T, root string) {
	c := newIMEXDir(t)
	s := imex.NewSupervisor(c.ConfigPath(), fastSupervisor(root, imex.WithReadyFailureThreshold(3))...)
	runSupervisor(t, s)
	waitFor(t, 10*time.Second, "nvidia-imex to be ready", func() bool { return s.State().Ready })
	ready := s.State()
	staysReadyThrough2Failures(t, s, c.Dir)
	if err := imextest.FailQueries(c.Dir, 1000); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "nvidia-imex to be not ready after failed queries", func() bool { return !s.State().Ready })
	if st := s.State(); !st.Running || st.PID != ready.PID {
		t.Errorf("state %+v: failed queries must not stop or restart nvidia-imex (pid %d)", st, ready.PID)
	}
	if err := imextest.FailQueries(c.Dir, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "nvidia-imex to be ready again", func() bool { return s.State().Ready })
	staysReadyThrough2Failures(t, s, c.Dir)
}

// staysReadyThrough2Failures makes the next 2 queries fail, waits until they were made and two
// more polls passed, and fails the test if s's state changed meanwhile.
func staysReadyThrough2Failures(t *testing.T, s *imex.Supervisor, dir string) {
	t.Helper()
	before := s.State()
	select {
	case <-s.Changed():
	default:
	}
	if err := imextest.FailQueries(dir, 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the failed queries to be made", func() bool {
		left, err := imextest.QueriesToFail(dir)
		return err == nil && left == 0
	})
	time.Sleep(60 * time.Millisecond) // two more polls of 20 ms
	select {
	case <-s.Changed():
		t.Errorf("the state changed through 2 failed queries (threshold 3): %+v, was %+v", s.State(), before)
	default:
	}
	if st := s.State(); st != before {
		t.Errorf("after 2 failed queries the state is %+v, want %+v", st, before)
	}
}
