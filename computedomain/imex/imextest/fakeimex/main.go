// Command fakeimex is a fake nvidia-imex and nvidia-imex-ctl in one program, for tests of
// package computedomain/imex without NVIDIA's binaries. It picks its role by the base name it
// was started as (argv[0]): "nvidia-imex" or "nvidia-imex-ctl". imextest.NewDriverRoot builds
// it into a driver root under both names; package imextest documents what it does and does not
// do.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpudra/gpudra/computedomain/imex/imextest"
)

func main() {
	role := filepath.Base(os.Args[0])
	var code int
	switch role {
	case "nvidia-imex":
		code = daemon(os.Args[1:], os.Stderr)
	case "nvidia-imex-ctl":
		code = ctl(os.Args[1:], os.Stdout, os.Stderr)
	default:
		fmt.Fprintf(os.Stderr, "fakeimex: started as %q; run it as nvidia-imex or nvidia-imex-ctl\n", role)
		code = 2
	}
	os.Exit(code)
}

// daemon is the fake nvidia-imex: it checks its config and nodes file, records its start,
// becomes ready, and runs until signalled (or until an injected fault ends it).
func daemon(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("nvidia-imex", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("c", "", "config file (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cfgPath == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "fake nvidia-imex: usage: nvidia-imex -c CONFIG")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "fake nvidia-imex: %v\n", err)
		return 1
	}
	cfg, err := imextest.ParseConfig(*cfgPath)
	if err != nil {
		return fail(err)
	}
	nodes, err := imextest.ParseNodes(cfg.NodesFile, cfg.BindIP)
	if err != nil {
		return fail(err)
	}
	dir := filepath.Dir(*cfgPath)
	faults, err := imextest.ReadFaults(dir)
	if err != nil {
		return fail(err)
	}
	st, err := record(dir, cfg, nodes)
	if err != nil {
		return fail(err)
	}
	logLine(cfg, "started, pid %d, start %d, nodes %v", st.PID, st.Starts, nodes)
	if faults.ExitCode != 0 {
		fmt.Fprintf(stderr, "fake nvidia-imex: exiting with code %d (injected fault)\n", faults.ExitCode)
		return faults.ExitCode
	}
	return run(dir, cfg, st, faults, stderr)
}

// record adds this start to the state in dir.
func record(dir string, cfg imextest.Config, nodes []string) (imextest.State, error) {
	st, err := imextest.ReadState(dir)
	if err != nil && !os.IsNotExist(err) {
		return st, err
	}
	st.PID, st.Starts, st.BindIP, st.Nodes, st.Ready = os.Getpid(), st.Starts+1, cfg.BindIP.String(), nodes, false
	st.StartTimes = append(st.StartTimes, time.Now())
	return st, imextest.WriteState(dir, st)
}

// run waits for readiness, signals, injected death and the loss of its parent.
func run(dir string, cfg imextest.Config, st imextest.State, faults imextest.Faults, stderr io.Writer) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	ready := time.After(faults.ReadyAfter)
	if faults.NeverReady {
		ready = nil
	}
	var die <-chan time.Time
	if faults.DieAfter > 0 {
		die = time.After(faults.DieAfter)
	}
	parent := os.Getppid()
	orphan := time.NewTicker(200 * time.Millisecond)
	defer orphan.Stop()
	for {
		select {
		case <-ready:
			ready = nil
			st.Ready = true
			if err := imextest.WriteState(dir, st); err != nil {
				fmt.Fprintf(stderr, "fake nvidia-imex: %v\n", err)
				return 1
			}
			logLine(cfg, "ready")
		case s := <-sig:
			if faults.IgnoreSIGTERM {
				logLine(cfg, "ignoring %v (injected fault)", s)
				continue
			}
			st.Ready = false
			_ = imextest.WriteState(dir, st)
			logLine(cfg, "stopping on %v", s)
			return 0
		case <-die:
			fmt.Fprintf(stderr, "fake nvidia-imex: dying after %v (injected fault)\n", faults.DieAfter)
			return 1
		case <-orphan.C:
			// The process that started it is gone (a test binary killed): do not outlive it.
			if os.Getppid() != parent {
				return 1
			}
		}
	}
}

// logLine appends a line to the config's LOG_FILE_NAME, if set.
func logLine(cfg imextest.Config, format string, args ...any) {
	if cfg.LogFile == "" {
		return
	}
	f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	fmt.Fprintf(f, "%s fake nvidia-imex: %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

// ctl is the fake nvidia-imex-ctl: only query mode (-q), answered from the state the fake
// nvidia-imex recorded next to the config file.
func ctl(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nvidia-imex-ctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	query := fs.Bool("q", false, "query the local daemon's state once")
	cfgPath := fs.String("c", "/etc/nvidia-imex/config.cfg", "config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !*query || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "fake nvidia-imex-ctl: usage: nvidia-imex-ctl -q [-c CONFIG] (the fake knows query mode only)")
		return 2
	}
	cfg, err := imextest.ParseConfig(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "fake nvidia-imex-ctl: %v\n", err)
		return 1
	}
	if !cfg.CmdEnabled {
		fmt.Fprintf(stderr, "fake nvidia-imex-ctl: the command service is disabled in %s (IMEX_CMD_ENABLED)\n", *cfgPath)
		return 1
	}
	dir := filepath.Dir(*cfgPath)
	if n, err := imextest.QueriesToFail(dir); err != nil || n > 0 {
		if err == nil {
			err = imextest.FailQueries(dir, n-1)
		}
		fmt.Fprintf(stderr, "fake nvidia-imex-ctl: cannot connect to nvidia-imex on port %d: injected failure (%v)\n", cfg.CmdPort, err)
		return 1
	}
	st, err := imextest.ReadState(dir)
	if err != nil || !imextest.Alive(st.PID) {
		fmt.Fprintf(stderr, "fake nvidia-imex-ctl: cannot connect to nvidia-imex on port %d: not running\n", cfg.CmdPort)
		return 1
	}
	if !st.Ready {
		fmt.Fprintln(stdout, "UNAVAILABLE")
		return 0
	}
	fmt.Fprintln(stdout, "READY")
	return 0
}
