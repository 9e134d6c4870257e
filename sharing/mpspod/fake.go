package mpspod

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpudra/gpudra/sharing"
)

// CommandsFile is the file in the daemon's log directory where a FakeControl records every
// command it was sent, one a line, so that tests can check what the daemon was told.
const CommandsFile = "commands.log"

// FakeControl is a Daemon for fake machines and tests: a control daemon in Go that listens on
// the spec's control socket, records each command line it receives (CommandsFile) and quits on
// "quit". It starts no MPS server.
type FakeControl struct {
	// Spec is the daemon's: its control socket is in PipeDir, CommandsFile in LogDir.
	Spec sharing.MPSDaemonSpec

	mu sync.Mutex
}

// Run implements Daemon.
func (f *FakeControl) Run(ctx context.Context) error {
	sock := f.Spec.ControlSocket()
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("fake MPS control daemon: %w", err)
	}
	defer func() { _ = os.Remove(sock) }()
	quit := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-ctx.Done():
		case <-quit:
		}
		_ = l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case <-quit:
				return nil
			default:
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("fake MPS control daemon: %w", err)
		}
		if f.serve(c) {
			once.Do(func() { close(quit) })
		}
	}
}

// serve records the commands of one connection; true when one of them was "quit".
func (f *FakeControl) serve(c net.Conn) bool {
	defer func() { _ = c.Close() }()
	quit := false
	s := bufio.NewScanner(c)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" {
			continue
		}
		if err := f.record(line); err != nil {
			_, _ = fmt.Fprintf(c, "error: %v\n", err)
			continue
		}
		_, _ = fmt.Fprintln(c, "ok")
		quit = quit || line == "quit"
	}
	return quit
}

func (f *FakeControl) record(line string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	file, err := os.OpenFile(filepath.Join(f.Spec.LogDir, CommandsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(file, line)
	return errors.Join(err, file.Close())
}

// Send implements Daemon: it connects to the control socket and writes the commands.
func (f *FakeControl) Send(ctx context.Context, cmds []string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", f.Spec.ControlSocket())
	if err != nil {
		return fmt.Errorf("fake MPS control daemon: %w", err)
	}
	defer func() { _ = c.Close() }()
	if _, err := fmt.Fprint(c, strings.Join(cmds, "\n")+"\n"); err != nil {
		return fmt.Errorf("fake MPS control daemon: %w", err)
	}
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	s := bufio.NewScanner(c)
	for range cmds {
		if !s.Scan() {
			return fmt.Errorf("fake MPS control daemon: no answer: %v", s.Err())
		}
		if a := s.Text(); a != "ok" {
			return fmt.Errorf("fake MPS control daemon: %s", a)
		}
	}
	return nil
}

// Commands returns the commands recorded in the spec's log directory, in order.
func Commands(spec sharing.MPSDaemonSpec) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(spec.LogDir, CommandsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), nil
}
