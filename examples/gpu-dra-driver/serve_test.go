package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpudra/gpudra/gpu/gputest"
)

// TestServeExitsWhenThePluginFails: a fatal error of the plugin (its DRA or registration gRPC
// server failed) ends its publish and supervision loops; serve must then return the error (exit
// 3, the pod is restarted), not serve on half dead. Found by review.
func TestServeExitsWhenThePluginFails(t *testing.T) {
	dir, err := os.MkdirTemp("", "serve") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s, err := parseServeFlags([]string{"--node-name", "n1", "--nvml", "fake", "--machine", "l4x8",
		"--state-dir", dir + "/s", "--plugin-dir", dir + "/p", "--registrar-dir", dir + "/r", "--cdi-root", dir + "/c",
		"--negotiate-features=false"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, err := s.node.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	for _, d := range []string{s.pluginDir, s.stateDir, s.cdiRoot, s.registrarDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}})
	plugin, reg, err := s.newPlugin(ctx, n, client)
	if err != nil {
		t.Fatal(err)
	}
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.run(ctx, plugin, reg, client, n, w) }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "serving") {
		t.Fatalf("serve's first line %q, %v; want it serving", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	plugin.HandleError(ctx, errors.New("accept unix dra.sock: use of closed network connection"), "DRA gRPC server failed")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "DRA gRPC server failed") {
			t.Errorf("serve returned %v, want the plugin's fatal error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still runs 10s after the plugin's fatal error (%v)", plugin.Err())
	}
}

// TestServeSkipsAFailedGPU (issue 28): serve leaves out, with a warning, a GPU that fails to
// enumerate, and serves the node's others; the offline commands still fail on it.
func TestServeSkipsAFailedGPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		skip bool
	}{{"serve", true}, {"offline command", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseServeFlags([]string{"--node-name", "n1", "--nvml", "fake", "--machine", "l4x8"})
			if err != nil {
				t.Fatal(err)
			}
			var warnings []string
			s.node.skipFailedGPUs, s.node.warn = tc.skip, func(msg string) { warnings = append(warnings, msg) }
			s.node.machineOpts = []gputest.Option{gputest.WithFault("Device.GetUUID", 2, nvml.ERROR_GPU_IS_LOST)}
			n, err := s.node.open(context.Background())
			if !tc.skip {
				if err == nil || !strings.Contains(err.Error(), "gpu 1") {
					t.Fatalf("open = %v, want the error of GPU 1", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer n.close()
			if len(n.inv.GPUs) != 7 || len(warnings) != 1 || !strings.Contains(warnings[0], "GPU 1 is not served") {
				t.Errorf("%d GPUs, warnings %q; want 7 and one naming GPU 1", len(n.inv.GPUs), warnings)
			}
		})
	}
}
