package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child process whose output goes to a log file. It is safe for concurrent use.
type Process struct {
	// Name says what the process is, for errors and logs ("kube-apiserver", "driver node-a").
	Name string
	// LogFile receives the process's stdout and stderr.
	LogFile string
	// Args are the command line, program first.
	Args []string

	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	waitErr error
}

// StartProcess starts args[0] with args[1:], appending its output to logFile. The process
// gets its own process group and is killed if the test binary dies.
func StartProcess(name, logFile string, env []string, args ...string) (*Process, error) {
	if len(args) == 0 {
		return nil, errors.New("start process: no program given")
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: log file: %w", name, err)
	}
	fmt.Fprintf(log, "=== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, args[0], err)
	}
	p := &Process{Name: name, LogFile: logFile, Args: args, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		_ = log.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Kill sends SIGKILL, as a crash or an OOM kill would, and waits for the exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills. It returns the exit
// error of a process that did not stop cleanly on SIGTERM.
func (p *Process) Stop(grace time.Duration) error {
	if exited, err := p.Exited(); exited {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		_, err := p.Exited()
		return err
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", p.Name, grace)
	}
}

// WaitExit waits until the process exits or ctx ends.
func (p *Process) WaitExit(ctx context.Context) error {
	select {
	case <-p.done:
		_, err := p.Exited()
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Tail returns the last n bytes of the process's log.
func (p *Process) Tail(n int64) string {
	return tailFile(p.LogFile, n)
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}
