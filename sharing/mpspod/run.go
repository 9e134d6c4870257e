package mpspod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/sharing"
)

// Daemon is the control daemon a daemon pod runs in its foreground.
type Daemon interface {
	// Run runs the daemon until it exits; cancelling ctx kills it (Quit asks it to go first).
	Run(ctx context.Context) error
	// Send sends control commands ("set_default_device_pinned_mem_limit 0 16384M", "quit").
	Send(ctx context.Context, cmds []string) error
}

// Run is the body of a daemon pod's command: it runs daemon for spec, waits until its control
// socket accepts, sends the spec's limits (spec.DefaultCommands) and writes ReadyFile; when ctx
// ends (SIGTERM: the pod is deleted) it sends "quit" and waits up to quitWait for the daemon to
// exit. A daemon that exits on its own is an error, so that kubelet restarts the container.
func Run(ctx context.Context, spec sharing.MPSDaemonSpec, daemon Daemon, quitWait time.Duration) error {
	logger := klog.FromContext(ctx).WithValues("daemon", spec.ID)
	ready := filepath.Join(spec.LogDir, ReadyFile)
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("MPS daemon %s: %w", spec.ID, err)
	}
	runCtx, kill := context.WithCancel(context.WithoutCancel(ctx))
	defer kill()
	exited := make(chan error, 1)
	go func() { exited <- daemon.Run(runCtx) }()
	if err := waitAccepts(ctx, spec, exited); err != nil {
		return err
	}
	if cmds := spec.DefaultCommands(); len(cmds) > 0 {
		if err := daemon.Send(ctx, cmds); err != nil {
			return fmt.Errorf("MPS daemon %s: applying its limits: %w", spec.ID, err)
		}
		logger.Info("Applied the daemon's limits", "commands", cmds)
	}
	if err := os.WriteFile(ready, []byte(strings.Join(spec.DefaultCommands(), "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("MPS daemon %s: %w", spec.ID, err)
	}
	logger.Info("MPS control daemon ready", "devices", spec.DeviceUUIDs, "pipeDir", spec.PipeDir)
	select {
	case err := <-exited:
		return fmt.Errorf("MPS daemon %s exited: %w", spec.ID, err)
	case <-ctx.Done():
	}
	logger.Info("Stopping MPS control daemon")
	_ = os.Remove(ready)
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), quitWait)
	defer cancel()
	if err := daemon.Send(qctx, []string{"quit"}); err != nil {
		logger.Error(err, "Asking the MPS control daemon to quit failed; killing it")
		kill()
	}
	select {
	case err := <-exited:
		if err != nil && !errors.Is(err, context.Canceled) {
			logger.Error(err, "MPS control daemon exited with an error")
		}
	case <-qctx.Done():
		kill()
		<-exited
	}
	return nil
}

// waitAccepts waits until the daemon's control socket accepts, or fails when the daemon exits.
func waitAccepts(ctx context.Context, spec sharing.MPSDaemonSpec, exited <-chan error) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if up, _ := sharing.ProbeMPSControl(spec); up {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("MPS daemon %s exited before its control socket accepted: %w", spec.ID, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Control is the Daemon of a real node: nvidia-cuda-mps-control -f of the driver root (run
// with the root's own loader; see sharing.DriverRootDir), commands sent through
// nvidia-cuda-mps-control's standard input.
type Control struct {
	// Root is the driver root the daemon and its client run from.
	Root sharing.DriverRootDir
	// Binary is nvidia-cuda-mps-control's path (in Root).
	Binary string
	// Spec is the daemon's: its devices, pipe and log directories.
	Spec sharing.MPSDaemonSpec
}

// NewControl returns the Control of spec with the driver root's nvidia-cuda-mps-control.
func NewControl(root sharing.DriverRootDir, spec sharing.MPSDaemonSpec) *Control {
	return &Control{Root: root, Binary: root.FindBinary("nvidia-cuda-mps-control"), Spec: spec}
}

// Run implements Daemon.
func (c *Control) Run(ctx context.Context) error {
	cmd, err := c.Root.Command(ctx, c.Binary, c.Spec.Env(), "-f")
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s -f: %w", c.Binary, err)
	}
	return nil
}

// Send implements Daemon.
func (c *Control) Send(ctx context.Context, cmds []string) error {
	cmd, err := c.Root.Command(ctx, c.Binary, c.Spec.Env())
	if err != nil {
		return err
	}
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", c.Binary, err, strings.TrimSpace(out.String()))
	}
	return nil
}
