package deviceplugin_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/deviceplugin"
)

// TestCheckNode: kubelet reports a registered device plugin's resources in the Node's capacity
// and allocatable, and sets them to 0 once the plugin is gone.
func TestCheckNode(t *testing.T) {
	q := resource.MustParse
	cases := []struct {
		name                  string
		capacity, allocatable corev1.ResourceList
		evidence              []string // nil: no conflict
	}{
		{name: "no GPU resources", capacity: corev1.ResourceList{"cpu": q("64"), "memory": q("512Gi")}},
		{name: "device plugin removed: kubelet reports 0", capacity: corev1.ResourceList{"nvidia.com/gpu": q("0")}, allocatable: corev1.ResourceList{"nvidia.com/gpu": q("0")}},
		{name: "another vendor's device plugin", capacity: corev1.ResourceList{"amd.com/gpu": q("8")}},
		{name: "device plugin with 8 GPUs", capacity: corev1.ResourceList{"cpu": q("64"), "nvidia.com/gpu": q("8")}, allocatable: corev1.ResourceList{"nvidia.com/gpu": q("8")},
			evidence: []string{"status.allocatable nvidia.com/gpu=8", "status.capacity nvidia.com/gpu=8"}},
		{name: "unhealthy GPUs: capacity only", capacity: corev1.ResourceList{"nvidia.com/gpu": q("8")}, allocatable: corev1.ResourceList{"nvidia.com/gpu": q("0")},
			evidence: []string{"status.capacity nvidia.com/gpu=8"}},
		{name: "mixed strategy", capacity: corev1.ResourceList{"nvidia.com/mig-1g.10gb": q("14"), "nvidia.com/mig-3g.40gb": q("2")},
			evidence: []string{"status.capacity nvidia.com/mig-1g.10gb=14", "status.capacity nvidia.com/mig-3g.40gb=2"}},
		{name: "time-slicing renamed", allocatable: corev1.ResourceList{"nvidia.com/gpu.shared": q("80")},
			evidence: []string{"status.allocatable nvidia.com/gpu.shared=80"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"},
				Status: corev1.NodeStatus{Capacity: tc.capacity, Allocatable: tc.allocatable}}
			err := deviceplugin.CheckNode(node)
			if tc.evidence == nil {
				if err != nil {
					t.Errorf("CheckNode: %v, want no conflict", err)
				}
				return
			}
			var conflict *deviceplugin.ConflictError
			if !errors.As(err, &conflict) {
				t.Fatalf("CheckNode: %v, want a *ConflictError", err)
			}
			if diff := cmp.Diff(tc.evidence, conflict.Evidence); diff != "" {
				t.Errorf("evidence (-want +got):\n%s", diff)
			}
			for _, want := range append([]string{"node gpu-1", "same GPU", "Remove the device plugin"}, tc.evidence...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q lacks %q", err, want)
				}
			}
		})
	}
	if err := deviceplugin.CheckNode(nil); err == nil {
		t.Error("CheckNode(nil) succeeded")
	}
}

// TestCheckSocketDir: a socket the device plugin listens on is evidence; a stale socket, a file
// that is not a socket, kubelet's own socket and a missing directory are not.
func TestCheckSocketDir(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	listen := func(name string) *net.UnixListener {
		t.Helper()
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	kubelet := listen("kubelet.sock")
	defer kubelet.Close()
	stale := listen("nvidia-gpu.sock")
	stale.SetUnlinkOnClose(false)
	_ = stale.Close()
	if err := os.WriteFile(filepath.Join(dir, "nvidia-notes.sock"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := deviceplugin.CheckSocketDir(dir); err != nil {
		t.Errorf("kubelet's socket, a stale socket and a plain file: %v, want no conflict", err)
	}
	if err := deviceplugin.CheckSocketDir(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("missing directory: %v", err)
	}

	live := listen("nvidia-mig-1g.10gb.sock")
	defer live.Close()
	var conflict *deviceplugin.ConflictError
	err = deviceplugin.CheckSocketDir(dir)
	if !errors.As(err, &conflict) || len(conflict.Evidence) != 1 || !strings.Contains(conflict.Evidence[0], "nvidia-mig-1g.10gb.sock") {
		t.Fatalf("a listening device plugin socket: %v", err)
	}
	if !strings.Contains(err.Error(), "this node") {
		t.Errorf("message %q does not say where", err)
	}
}
