package sharing_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
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
		LogDir: filepath.Join(d, "log"), ShmDir: filepath.Join(d, "shm")}
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
	ctl := sharing.NewMPSControl(sharing.WithMPSBinary(bin), sharing.WithMPSReadyTimeout(100*time.Millisecond),
		sharing.WithMPSMounter(sharingtest.NewFakeHost()))
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

// shortTempDir is a temporary directory with a short path: unix socket paths are limited to
// 108 bytes, and t.TempDir's are long.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// fakeMPSBinary makes the test binary act as nvidia-cuda-mps-control (see TestMain).
func fakeMPSBinary(t *testing.T) string {
	t.Helper()
	t.Setenv("GPUDRA_FAKE_MPS", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestMPSControl runs the fake daemon through Start, Ready, Running and Stop: the shm directory
// is a tmpfs of the spec's size while the daemon runs (defect 13), and nothing is left after.
func TestMPSControl(t *testing.T) {
	dir := shortTempDir(t)
	spec := specIn(dir, "c1", "GPU-a", "GPU-b")
	spec.ShmSizeBytes = 64 << 20
	mounts := sharingtest.NewFakeHost()
	ctl := sharing.NewMPSControl(sharing.WithMPSBinary(fakeMPSBinary(t)), sharing.WithMPSReadyTimeout(10*time.Second), sharing.WithMPSMounter(mounts))
	ctx := context.Background()
	if running, err := ctl.Running(ctx, spec); running || err != nil {
		t.Fatalf("Running before Start = %v, %v; want false", running, err)
	}
	if err := ctl.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := ctl.Ready(ctx, spec); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if running, err := ctl.Running(ctx, spec); !running || err != nil {
		t.Errorf("Running after Start = %v, %v; want true", running, err)
	}
	if err := ctl.Start(ctx, spec); err != nil { // already running: no second daemon
		t.Fatalf("second Start: %v", err)
	}
	if diff := cmp.Diff(map[string]int64{spec.ShmDir: 64 << 20}, mounts.State().Mounts); diff != "" {
		t.Errorf("mounts while the daemon runs (-want +got):\n%s", diff)
	}
	if err := ctl.Stop(ctx, spec); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if running, err := ctl.Running(ctx, spec); running || err != nil {
		t.Errorf("Running after Stop = %v, %v; want false", running, err)
	}
	if got := mounts.State().Mounts; len(got) != 0 {
		t.Errorf("mounts after Stop = %v, want none", got)
	}
	if _, err := os.Stat(spec.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("daemon directory left behind: %v", err)
	}
	if err := ctl.Stop(ctx, spec); err != nil {
		t.Errorf("Stop of a stopped daemon: %v", err)
	}
	short := sharing.NewMPSControl(sharing.WithMPSBinary("/bin/true"), sharing.WithMPSReadyTimeout(200*time.Millisecond), sharing.WithMPSMounter(mounts))
	if err := short.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "did not accept connections") {
		t.Errorf("Start of a daemon that never listens = %v, want a readiness timeout", err)
	}
}

// TestMPSControlWhenTheProbeCannotTell: when connecting to the control socket fails for another
// reason than "no socket" or "nobody listens" — here the daemon's listen backlog is full, as
// under a burst of clients — whether the daemon runs is unknown. Start must not start a second
// daemon on the pipe directory, and Stop must not unmount or remove the directories of a daemon
// that may still run.
func TestMPSControlWhenTheProbeCannotTell(t *testing.T) {
	spec := specIn(shortTempDir(t), "c1", "GPU-a")
	if err := os.MkdirAll(spec.PipeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fillBacklog(t, filepath.Join(spec.PipeDir, "control"))
	marker := filepath.Join(t.TempDir(), "started")
	bin := writeScript(t, t.TempDir(), "nvidia-cuda-mps-control", "touch "+marker+"\n")
	mounts := sharingtest.NewFakeHost()
	ctl := sharing.NewMPSControl(sharing.WithMPSBinary(bin), sharing.WithMPSReadyTimeout(100*time.Millisecond), sharing.WithMPSMounter(mounts))
	ctx := context.Background()
	if err := ctl.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "cannot tell whether it runs") {
		t.Errorf("Start = %v, want an error saying whether the daemon runs is unknown", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start ran nvidia-cuda-mps-control although a daemon may run (stat: %v)", err)
	}
	if err := ctl.Stop(ctx, spec); err == nil || !strings.Contains(err.Error(), "cannot tell whether it runs") {
		t.Errorf("Stop = %v, want an error saying whether the daemon runs is unknown", err)
	}
	if _, err := os.Stat(filepath.Join(spec.PipeDir, "control")); err != nil {
		t.Errorf("Stop removed the pipe directory of a daemon that may run: %v", err)
	}
	if diff := cmp.Diff(map[string]int64{spec.ShmDir: sharing.DefaultMPSShmSize}, mounts.State().Mounts); diff != "" {
		t.Errorf("shm mounts after Stop, as Start left them (-want +got):\n%s", diff)
	}
}

// fillBacklog listens on a unix socket at path with the smallest backlog, accepts nothing, and
// connects until the kernel refuses another connection for now (EAGAIN).
func fillBacklog(t *testing.T, path string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	for range 16 {
		c, err := net.DialTimeout("unix", path, time.Second)
		if errors.Is(err, syscall.EAGAIN) {
			return
		}
		if err != nil {
			t.Fatalf("filling the backlog of %s: %v", path, err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	t.Fatalf("the backlog of %s never filled", path)
}

// TestMPSControlAtAnAddressNoDaemonCanListenOn: a control socket path longer than a unix socket
// address allows (a long plugin directory or driver name) cannot be listened on, so no daemon
// runs there: Start fails at the readiness wait and Stop cleans up, rather than both refusing
// for ever and leaving the claim stuck.
func TestMPSControlAtAnAddressNoDaemonCanListenOn(t *testing.T) {
	spec := specIn(filepath.Join(t.TempDir(), strings.Repeat("d", 100)), "c1", "GPU-a") // > 108 bytes
	mounts := sharingtest.NewFakeHost()
	ctl := sharing.NewMPSControl(sharing.WithMPSBinary("/bin/true"), sharing.WithMPSReadyTimeout(100*time.Millisecond), sharing.WithMPSMounter(mounts))
	ctx := context.Background()
	if err := ctl.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "did not accept connections") {
		t.Errorf("Start = %v, want the readiness timeout", err)
	}
	if err := ctl.Stop(ctx, spec); err != nil {
		t.Errorf("Stop = %v, want the directories removed", err)
	}
	if _, err := os.Stat(spec.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("daemon directory left behind: %v", err)
	}
	if got := mounts.State().Mounts; len(got) != 0 {
		t.Errorf("mounts after Stop = %v, want none", got)
	}
}

// TestMPSControlShmMountFails: a shm directory that cannot be mounted fails Start before the
// daemon is started (a daemon must never use an unbounded directory on the kubelet disk).
func TestMPSControlShmMountFails(t *testing.T) {
	dir := shortTempDir(t)
	spec := specIn(dir, "c1", "GPU-a")
	mounts := sharingtest.NewFakeHost()
	mounts.FailOn("Mount "+spec.ShmDir+" "+strconv.FormatInt(sharing.DefaultMPSShmSize, 10), errors.New("operation not permitted"))
	ctl := sharing.NewMPSControl(sharing.WithMPSBinary(fakeMPSBinary(t)), sharing.WithMPSMounter(mounts))
	err := ctl.Start(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "operation not permitted") || !strings.Contains(err.Error(), "MPS daemon c1") {
		t.Fatalf("Start = %v, want the mount error naming the daemon", err)
	}
	if running, _ := ctl.Running(context.Background(), spec); running {
		t.Error("the daemon was started without its shm tmpfs")
	}
}

func TestMPSControlCommands(t *testing.T) {
	dir := shortTempDir(t)
	spec := specIn(dir, "c2", "MIG-x")
	pct := 30
	spec.ActiveThreadPercentage = &pct
	spec.PinnedMemoryLimits = map[string]string{"0": "1024M"}
	ctl := sharing.NewMPSControl(sharing.WithMPSBinary(fakeMPSBinary(t)), sharing.WithMPSMounter(sharingtest.NewFakeHost()))
	ctx := context.Background()
	if err := ctl.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// The fake daemon logs what it was told; read the log before Stop removes it.
	deadline := time.Now().Add(5 * time.Second)
	want := "start CUDA_VISIBLE_DEVICES=MIG-x\nset_default_active_thread_percentage 30\nset_default_device_pinned_mem_limit 0 1024M\n"
	var got string
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(spec.LogDir, "control.log"))
		if got = string(b); got == want {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("daemon saw (-want +got):\n%s", diff)
	}
	if err := ctl.Stop(ctx, spec); err != nil {
		t.Fatal(err)
	}
}

// TestTmpfsMounter mounts a real tmpfs where the test may (root with CAP_SYS_ADMIN): its size
// is bounded, it is world-writable with the sticky bit, and Unmount is idempotent.
func TestTmpfsMounter(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "shm")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	m := sharing.NewTmpfsMounter()
	ctx := context.Background()
	if err := m.Unmount(ctx, target); err != nil {
		t.Fatalf("Unmount of a plain directory: %v", err)
	}
	if err := m.Mount(ctx, target, 0); err == nil {
		t.Error("Mount with size 0 succeeded")
	}
	if err := m.Mount(ctx, target, 1<<20); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			t.Skipf("mounting needs CAP_SYS_ADMIN: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(target, 0) })
	if err := m.Mount(ctx, target, 1<<20); err != nil { // already mounted: left as it is
		t.Fatalf("second Mount: %v", err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(target, &fs); err != nil {
		t.Fatal(err)
	}
	const tmpfsMagic = 0x01021994
	if fs.Type != tmpfsMagic || uint64(fs.Blocks)*uint64(fs.Bsize) != 1<<20 {
		t.Errorf("mounted file system: type %#x, %d bytes; want tmpfs (%#x) of 1 MiB", fs.Type, uint64(fs.Blocks)*uint64(fs.Bsize), tmpfsMagic)
	}
	if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("tmpfs root mode = %v, %v; want drwxrwxrwt", st.Mode(), err)
	}
	// Writing past the size fails: the shm of one daemon cannot fill the node.
	if err := os.WriteFile(filepath.Join(target, "big"), make([]byte, 2<<20), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("writing 2 MiB into a 1 MiB tmpfs = %v, want ENOSPC", err)
	}
	for range 2 {
		if err := m.Unmount(ctx, target); err != nil {
			t.Fatalf("Unmount: %v", err)
		}
	}
	if err := os.Remove(target); err != nil {
		t.Errorf("the mount point is still busy after Unmount: %v", err)
	}
}
