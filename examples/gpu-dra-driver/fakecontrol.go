package main

// The fake-control endpoint is a test seam, nothing more: `serve --nvml=fake --fake-control ADDR`
// lets an end-to-end test reach the fake machine that lives inside the serve process, as a
// test with the machine in its own process would call gputest directly. It only exists with a
// fake machine, listens on loopback only, and changes nothing a real node could see.

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

// healthMarker is what the fake control needs from the plugin.
type healthMarker interface {
	MarkHealthy(ctx context.Context, device string) error
}

// FakeState is what GET /state answers: the fake machine's MIG instances and the fake host's
// sharing state, for tests to check that unprepare leaves nothing behind.
type FakeState struct {
	// GPUs are the fake machine's GPUs, by index.
	GPUs []FakeGPUState `json:"gpus"`
	// Host is the fake host's compute modes, time slices and MPS daemons.
	Host sharingtest.HostState `json:"host"`
}

// FakeGPUState is one GPU of the fake machine.
type FakeGPUState struct {
	// Index is the GPU's NVML index.
	Index int `json:"index"`
	// UUID is the GPU's UUID.
	UUID string `json:"uuid"`
	// MIGEnabled is the GPU's current MIG mode.
	MIGEnabled bool `json:"migEnabled"`
	// Instances are the GPU instances that exist on the GPU.
	Instances []gputest.GPUInstanceState `json:"instances,omitempty"`
}

type fakeControl struct {
	machine *gputest.Machine
	host    *sharingtest.FakeHost
	plugin  healthMarker
	inv     *gpu.Inventory
}

// newFakeControl serves:
//
//	POST /xid?gpu=<index>&xid=<number>   the driver reports XID <number> on GPU <index>
//	POST /healthy?gpu=<index>            an operator declares GPU <index> healthy again
//	GET  /state                          FakeState as JSON
func newFakeControl(m *gputest.Machine, host *sharingtest.FakeHost, plugin healthMarker, inv *gpu.Inventory) http.Handler {
	fc := &fakeControl{machine: m, host: host, plugin: plugin, inv: inv}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /xid", fc.xid)
	mux.HandleFunc("POST /healthy", fc.healthy)
	mux.HandleFunc("GET /state", fc.state)
	return mux
}

func (fc *fakeControl) xid(w http.ResponseWriter, r *http.Request) {
	i, err := fc.gpuIndex(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	xid, err := strconv.ParseUint(r.URL.Query().Get("xid"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("xid=%q: want a number", r.URL.Query().Get("xid")), http.StatusBadRequest)
		return
	}
	if err := fc.machine.InjectXID(i, xid); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	klog.FromContext(r.Context()).Info("Fake control: injected an XID", "gpu", i, "xid", xid)
}

func (fc *fakeControl) healthy(w http.ResponseWriter, r *http.Request) {
	i, err := fc.gpuIndex(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := fc.plugin.MarkHealthy(r.Context(), fc.inv.GPUs[i].UUID); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	klog.FromContext(r.Context()).Info("Fake control: GPU marked healthy", "gpu", i)
}

func (fc *fakeControl) state(w http.ResponseWriter, _ *http.Request) {
	st := FakeState{Host: fc.host.State()}
	for i, g := range fc.inv.GPUs {
		st.GPUs = append(st.GPUs, FakeGPUState{Index: i, UUID: g.UUID, MIGEnabled: fc.machine.MIGEnabled(i), Instances: fc.machine.GPUInstances(i)})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

func (fc *fakeControl) gpuIndex(r *http.Request) (int, error) {
	s := r.URL.Query().Get("gpu")
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(fc.inv.GPUs) {
		return 0, fmt.Errorf("gpu=%q: want a GPU index from 0 to %d", s, len(fc.inv.GPUs)-1)
	}
	return i, nil
}

// controlAddr accepts the addresses the test controls may listen on: host:port whose host is
// a loopback IP or "localhost", or unix:PATH, an absolute path of a unix socket (for a plugin
// pod with its own network namespace: the socket lies on a host directory the tests can reach,
// readable by root only).
func controlAddr(addr string) error {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return fmt.Errorf("unix:PATH needs a clean absolute path")
		}
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("the test controls listen on loopback only (127.0.0.1:PORT, [::1]:PORT or localhost:PORT) or on a unix socket (unix:/ABSOLUTE/PATH)")
	}
	return nil
}

// listen listens on a controlAddr address: TCP, or a unix socket of mode 0600 that replaces a
// socket a previous run of the same pod left behind.
func listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return ln, nil
}
