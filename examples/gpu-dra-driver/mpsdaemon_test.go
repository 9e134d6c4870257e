package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/mpspod"
)

// TestMPSDaemonFlags: serve's MPS daemon pod flags go together; mps-daemon refuses a spec it
// cannot run.
func TestMPSDaemonFlags(t *testing.T) {
	fake := []string{"serve", "--node-name", "n1", "--nvml", "fake", "--machine", "l4x8"}
	runCases(t, []cliCase{
		{name: "pods without image", args: append(fake, "--mps-daemon-pods", "--mps-daemon-namespace", "ns"), code: 2, stderr: "needs --mps-daemon-image"},
		{name: "pods without namespace", args: append(fake, "--mps-daemon-pods", "--mps-daemon-image", "img", "--mps-daemon-namespace", ""), code: 2, stderr: "--mps-daemon-namespace"},
		{name: "image without pods", args: append(fake, "--mps-daemon-image", "img"), code: 2, stderr: "--mps-daemon-image needs --mps-daemon-pods"},
		{name: "mps-daemon without spec", args: []string{"mps-daemon"}, code: 2, stderr: "--spec"},
		{name: "mps-daemon spec without dirs", args: []string{"mps-daemon", "--spec", `{"id":"x"}`}, code: 2, stderr: "pipeDir and logDir are required"},
		{name: "mps-daemon relative root", args: []string{"mps-daemon", "--spec", `{"id":"x","pipeDir":"/p","logDir":"/l"}`, "--driver-root", "r"}, code: 2, stderr: "must be an absolute path"},
	})
}

// TestMPSDaemonFake: mps-daemon --fake serves the control socket, applies the spec's limits,
// reports ready and, when stopped, quits and removes the ready file.
func TestMPSDaemonFake(t *testing.T) {
	dir, err := os.MkdirTemp("", "mpsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pct := 25
	spec := sharing.MPSDaemonSpec{ID: "d", DeviceUUIDs: []string{"GPU-a"}, Dir: dir, PipeDir: filepath.Join(dir, "pipe"),
		LogDir: filepath.Join(dir, "log"), ShmDir: filepath.Join(dir, "shm"), ActiveThreadPercentage: &pct,
		PinnedMemoryLimits: map[string]string{"0": "8192M"}}
	if err := spec.CreateDirs(); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(spec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out, errb bytes.Buffer
	go func() { done <- run(ctx, []string{"mps-daemon", "--fake", "--spec", string(js)}, &out, &errb) }()
	ready := filepath.Join(spec.LogDir, mpspod.ReadyFile)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not ready within 10s: %s%s", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if up, err := sharing.ProbeMPSControl(spec); !up || err != nil {
		t.Errorf("control socket accepts: %v, %v", up, err)
	}
	cancel()
	code := <-done
	cmds, err := mpspod.Commands(spec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 8192M", "quit"}, cmds); diff != "" {
		t.Errorf("commands the fake daemon got (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(ready); !os.IsNotExist(err) {
		t.Errorf("ready file left after stop: %v", err)
	}
	if up, _ := sharing.ProbeMPSControl(spec); up {
		t.Errorf("control socket still accepts after stop")
	}
	t.Logf("exit %d", code)
}
