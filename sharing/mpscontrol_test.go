package sharing_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudra/gpudra/sharing"
)

// writeScript writes an executable shell script into dir and returns its path.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// specIn is a daemon spec whose directories lie under dir.
func specIn(dir, id string, uuids ...string) sharing.MPSDaemonSpec {
	d := filepath.Join(dir, id)
	return sharing.MPSDaemonSpec{ID: id, DeviceUUIDs: uuids, Dir: d, PipeDir: filepath.Join(d, "pipe"),
		LogDir: filepath.Join(d, "log"), ShmDir: filepath.Join(d, "shm"), ClientLimit: 48}
}

// TestMPSStartDoesNotWaitForTheDaemon (defect 8): `nvidia-cuda-mps-control -d` forks the daemon,
// which inherits the starter's stdout and stderr and keeps them open for its whole life. Start
// must return when the starter exits, not when the daemon does.
func TestMPSStartDoesNotWaitForTheDaemon(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "daemon.pid")
	// The "daemon" is a sleep that inherits stdout and stderr; the starter exits at once.
	bin := writeScript(t, dir, "nvidia-cuda-mps-control", `if [ "$1" = "-d" ]; then
  sleep 60 &
  echo $! > `+pidFile+`
  echo started
fi
exit 0
`)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	ctl := sharing.NewMPSControl(sharing.WithMPSBinary(bin), sharing.WithMPSReadyTimeout(100*time.Millisecond))
	spec := specIn(dir, "c1", "GPU-a")
	done := make(chan error, 1)
	go func() { done <- ctl.Start(context.Background(), spec) }()
	select {
	case err := <-done:
		// The fake daemon never opens a control socket: Start reaches the readiness wait and
		// reports it, which proves it did not wait for the daemon to close its output.
		if err == nil || !strings.Contains(err.Error(), "did not accept connections") {
			t.Fatalf("Start = %v, want a readiness timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Start still blocked 20s after nvidia-cuda-mps-control -d exited: it waits for the daemon to close its stdout")
	}
}
