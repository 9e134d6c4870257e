package imex

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/driverroot"
)

// The programs the Supervisor runs, found in the driver root.
const (
	// IMEXBinary is NVIDIA's IMEX daemon.
	IMEXBinary = "nvidia-imex"
	// CtlBinary is its control tool, asked in query mode (-q) whether the daemon is ready.
	CtlBinary = "nvidia-imex-ctl"
	// ReadyAnswer is what `nvidia-imex-ctl -q` prints, alone on its line and with exit status
	// 0, once the local nvidia-imex is ready (it has its node list and serves imports). Any
	// other output, or another exit status (nvidia-imex not running, its command service not
	// answering), means not ready.
	ReadyAnswer = "READY"
)

// Supervisor defaults (production values; options change them).
const (
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = 30 * time.Second
	// DefaultBackoffReset: a run that stayed up this long resets the backoff.
	DefaultBackoffReset = time.Minute
	// DefaultStopGrace is how long nvidia-imex has to exit after SIGTERM before SIGKILL.
	DefaultStopGrace = 10 * time.Second
	// DefaultReadyPoll is how often nvidia-imex-ctl is asked while nvidia-imex runs.
	DefaultReadyPoll = time.Second
	// DefaultReadyTimeout bounds one nvidia-imex-ctl query.
	DefaultReadyTimeout = 5 * time.Second
	// DefaultReadyFailureThreshold is how many queries in a row must fail (not READY, an error
	// or a timeout) before a ready nvidia-imex counts as not ready, as the default
	// failureThreshold of a Kubernetes probe.
	DefaultReadyFailureThreshold = 3
)

// State is what a Supervisor reports about its nvidia-imex.
type State struct {
	// Running is true while an nvidia-imex process runs.
	Running bool
	// PID is the running process's ID (0 when none runs).
	PID int
	// Ready is true once nvidia-imex-ctl answered ReadyAnswer for the running process, until
	// the process ends or the failure threshold of queries in a row say otherwise
	// (WithReadyFailureThreshold).
	Ready bool
	// Starts counts the processes started.
	Starts int
	// LastExit says how the latest process ended on its own (or failed to start): the command,
	// the exit status and the end of its standard error. Empty when none did.
	LastExit string
	// Backoff is the wait before the next start, while none runs after an exit.
	Backoff time.Duration
}

// Supervisor runs nvidia-imex (`nvidia-imex -c CONFIG`) as its child and keeps it running:
// when it exits it starts it again after an exponential backoff (DefaultBackoffInitial doubling
// up to DefaultBackoffMax; reset when a run lasted DefaultBackoffReset); Restart stops and
// starts it at once (the node list changed: nvidia-imex reads it only when it starts); while it
// runs, `nvidia-imex-ctl -q -c CONFIG` says whether it is ready. On the end of Run's context it
// stops the process: SIGTERM, then SIGKILL after DefaultStopGrace.
//
// Both programs are found in a driver root (internal/driverroot.FindBinary) and run with its
// own dynamic loader when the root is not "/" (internal/driverroot.Command).
type Supervisor struct {
	config              string
	root                string
	imexBin, ctlBin     string
	initial, max, reset time.Duration
	grace               time.Duration
	poll, queryTimeout  time.Duration
	failureThreshold    int
	output              io.Writer
	restart, changed    chan struct{}
	mu                  sync.Mutex
	state               State
}

// SupervisorOption configures NewSupervisor.
type SupervisorOption func(*Supervisor)

// WithDriverRoot finds nvidia-imex and nvidia-imex-ctl in root ("/" by default).
func WithDriverRoot(root string) SupervisorOption { return func(s *Supervisor) { s.root = root } }

// WithBackoff sets the restart backoff: the first wait, its cap, and how long a run must last
// to reset it.
func WithBackoff(initial, maximum, reset time.Duration) SupervisorOption {
	return func(s *Supervisor) { s.initial, s.max, s.reset = initial, maximum, reset }
}

// WithStopGrace sets how long nvidia-imex has after SIGTERM before SIGKILL.
func WithStopGrace(d time.Duration) SupervisorOption { return func(s *Supervisor) { s.grace = d } }

// WithReadyPoll sets how often nvidia-imex-ctl is asked, and how long one query may take.
func WithReadyPoll(interval, timeout time.Duration) SupervisorOption {
	return func(s *Supervisor) { s.poll, s.queryTimeout = interval, timeout }
}

// WithReadyFailureThreshold sets how many queries in a row must fail before a ready
// nvidia-imex counts as not ready (DefaultReadyFailureThreshold; 1 turns it not ready on the
// first failure). One nvidia-imex-ctl that times out or cannot connect once, on a loaded node,
// then does not make the node NotReady for its domain. A process that ends is not ready at once.
func WithReadyFailureThreshold(n int) SupervisorOption {
	return func(s *Supervisor) { s.failureThreshold = max(n, 1) }
}

// WithOutput sends nvidia-imex's standard output and error to w (this process's standard
// error by default: the daemon container's log).
func WithOutput(w io.Writer) SupervisorOption { return func(s *Supervisor) { s.output = w } }

// NewSupervisor returns a Supervisor of nvidia-imex with the config file configPath.
func NewSupervisor(configPath string, opts ...SupervisorOption) *Supervisor {
	s := &Supervisor{
		config: configPath, root: "/",
		initial: DefaultBackoffInitial, max: DefaultBackoffMax, reset: DefaultBackoffReset,
		grace: DefaultStopGrace, poll: DefaultReadyPoll, queryTimeout: DefaultReadyTimeout,
		failureThreshold: DefaultReadyFailureThreshold,
		output:           os.Stderr,
		restart:          make(chan struct{}, 1), changed: make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(s)
	}
	s.imexBin = driverroot.FindBinary(s.root, IMEXBinary)
	s.ctlBin = driverroot.FindBinary(s.root, CtlBinary)
	return s
}

// State returns the latest state.
func (s *Supervisor) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Changed receives after each change of State (changes in a row may arrive as one).
func (s *Supervisor) Changed() <-chan struct{} { return s.changed }

// Restart asks Run to stop the running nvidia-imex and start it again at once. Without a
// running process it does nothing more: the next start reads the files anew anyway.
func (s *Supervisor) Restart() {
	select {
	case s.restart <- struct{}{}:
	default:
	}
}

// update changes the state under the lock and signals Changed.
func (s *Supervisor) update(f func(*State)) {
	s.mu.Lock()
	old := s.state
	f(&s.state)
	changed := s.state != old
	s.mu.Unlock()
	if changed {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

// runEnd is how one run of nvidia-imex ended.
type runEnd int

const (
	exited    runEnd = iota // on its own, or it failed to start
	restarted               // Restart asked for it
	stopped                 // Run's context ended
)

// Run supervises nvidia-imex until ctx ends, then stops it and returns nil. Call it once.
func (s *Supervisor) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("binary", s.imexBin, "config", s.config)
	ctx = klog.NewContext(ctx, logger)
	var backoff time.Duration
	for {
		began := time.Now()
		switch s.runOnce(ctx) {
		case stopped:
			return nil
		case restarted:
			continue
		}
		backoff = s.nextBackoff(backoff, time.Since(began))
		s.update(func(st *State) { st.Backoff = backoff })
		logger.Info("nvidia-imex ended; starting it again after the backoff", "backoff", backoff, "lastExit", s.State().LastExit)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// nextBackoff doubles the previous backoff up to the cap, or starts over when the run lasted
// long enough.
func (s *Supervisor) nextBackoff(prev, ran time.Duration) time.Duration {
	if prev == 0 || ran >= s.reset {
		return s.initial
	}
	return min(2*prev, s.max)
}

// runOnce starts nvidia-imex and watches it until it exits, a restart is asked for, or ctx ends.
func (s *Supervisor) runOnce(ctx context.Context) runEnd {
	logger := klog.FromContext(ctx)
	// A request made before this start is served by it: the files are read now.
	select {
	case <-s.restart:
	default:
	}
	procCtx, stop := context.WithCancel(ctx)
	defer stop()
	cmd, tail, err := s.command(procCtx)
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		s.update(func(st *State) { *st = State{Starts: st.Starts, LastExit: err.Error()} })
		logger.Error(err, "cannot start nvidia-imex")
		return exited
	}
	s.update(func(st *State) {
		*st = State{Running: true, PID: cmd.Process.Pid, Starts: st.Starts + 1, LastExit: st.LastExit}
	})
	logger.Info("nvidia-imex started", "pid", cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	end, err := s.watch(procCtx, ctx, stop, done)
	s.update(func(st *State) {
		st.Running, st.PID, st.Ready, st.Backoff = false, 0, false, 0
		if end == exited {
			st.LastExit = describeExit(cmd, s.imexBin, s.imexArgs(), err, tail.String())
		}
	})
	return end
}

// watch polls readiness until the process ends (done), a restart is asked for, or ctx ends;
// in the last two cases it stops the process (stop: SIGTERM, SIGKILL after the grace period)
// and waits for it.
func (s *Supervisor) watch(procCtx, ctx context.Context, stop context.CancelFunc, done <-chan error) (runEnd, error) {
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	var answer chan bool // the query in flight, nil when none
	failures := 0        // queries in a row that did not say READY
	for {
		select {
		case err := <-done:
			return exited, err
		case <-ctx.Done():
			stop()
			return stopped, <-done
		case <-s.restart:
			klog.FromContext(ctx).Info("restarting nvidia-imex on request")
			stop()
			return restarted, <-done
		case <-tick.C:
			if answer == nil {
				answer = make(chan bool, 1)
				go func(ch chan<- bool) { ch <- s.ready(procCtx) }(answer)
			}
		case ready := <-answer:
			answer = nil
			if ready {
				failures = 0
			} else {
				failures++
			}
			s.update(func(st *State) { st.Ready = ready || st.Ready && failures < s.failureThreshold })
		}
	}
}

// command returns the nvidia-imex command, bound to ctx: its end sends SIGTERM, and SIGKILL
// follows after the grace period. Its standard error also goes to the returned buffer.
func (s *Supervisor) command(ctx context.Context) (*exec.Cmd, *tailBuffer, error) {
	cmd, err := driverroot.Command(ctx, s.root, s.imexBin, nil, s.imexArgs()...)
	if err != nil {
		return nil, nil, err
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = s.grace
	tail := &tailBuffer{max: 2 << 10}
	cmd.Stdout = s.output
	cmd.Stderr = io.MultiWriter(s.output, tail)
	return cmd, tail, nil
}

// imexArgs are nvidia-imex's arguments.
func (s *Supervisor) imexArgs() []string { return []string{"-c", s.config} }

// ready asks nvidia-imex-ctl in query mode whether nvidia-imex is ready (see ReadyAnswer).
func (s *Supervisor) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, s.queryTimeout)
	defer cancel()
	args := []string{"-q", "-c", s.config}
	cmd, err := driverroot.Command(ctx, s.root, s.ctlBin, nil, args...)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("cannot query nvidia-imex", "err", err)
		return false
	}
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		klog.FromContext(ctx).V(4).Info("nvidia-imex not ready", "command", driverroot.CommandLine(cmd, s.ctlBin, args), "err", err)
		return false
	}
	return strings.TrimSpace(string(out)) == ReadyAnswer
}

// describeExit says how a run ended: the command line, the error and the end of its stderr.
func describeExit(cmd *exec.Cmd, bin string, args []string, err error, stderr string) string {
	what := "exited with status 0"
	if err != nil {
		what = err.Error()
	}
	s := fmt.Sprintf("%s: %s", driverroot.CommandLine(cmd, bin, args), what)
	if stderr = strings.TrimSpace(stderr); stderr != "" {
		s += ": " + stderr
	}
	return s
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

var _ io.Writer = (*tailBuffer)(nil)

// Write implements io.Writer.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if extra := t.b.Len() - t.max; extra > 0 {
		t.b.Next(extra)
	}
	return len(p), nil
}

// String returns what the buffer holds.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
