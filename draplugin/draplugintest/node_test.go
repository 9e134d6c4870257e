package draplugintest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

const timeSlicing = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`

func newNode(t *testing.T, machine string, opts ...draplugintest.NodeOption) *draplugintest.Node {
	t.Helper()
	n, err := draplugintest.NewNode(machine, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(n.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Close left %s: %v", n.Dir, err)
		}
	})
	return n
}

// TestRebootResetsWhatARebootErases checks the reboot model: boot ID changes, MIG instances,
// host settings and CDI specs are gone, the state directory stays.
func TestRebootResetsWhatARebootErases(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "dgx-a100-40gb", draplugintest.WithDynamicMIG())
	p, err := n.NewPlugin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mig, err := n.Allocate(ctx, draplugintest.Claim("mig", "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'", ""))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := n.Allocate(ctx, draplugintest.Claim("ts", "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].index == 1", timeSlicing))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*resourceapi.ResourceClaim{mig, ts} {
		if _, err := draplugintest.Prepare(ctx, p, c); err != nil {
			t.Fatal(err)
		}
	}
	bootBefore, _ := os.ReadFile(n.BootIDPath)
	if len(n.MIGInstances()) != 1 || n.HostClean() == nil {
		t.Fatalf("before reboot: instances %v, host clean %v", n.MIGInstances(), n.HostClean())
	}
	if err := n.Reboot(); err != nil {
		t.Fatal(err)
	}
	bootAfter, _ := os.ReadFile(n.BootIDPath)
	specs, err := n.Specs()
	if err != nil {
		t.Fatal(err)
	}
	if string(bootBefore) == string(bootAfter) || len(n.MIGInstances()) != 0 || n.HostClean() != nil || len(specs) != 0 {
		t.Errorf("after reboot: boot %q→%q, instances %v, host %v, specs %v", bootBefore, bootAfter, n.MIGInstances(), n.HostClean(), specs)
	}
	if _, err := os.Stat(filepath.Join(n.StateDir, "checkpoint.json")); err != nil {
		t.Errorf("state directory lost the checkpoint: %v", err)
	}
}

// TestServeTalksLikeKubelet prepares and unprepares through the plugin's sockets.
func TestServeTalksLikeKubelet(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "l4x8")
	p, err := n.NewPlugin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Allocate(ctx, draplugintest.Claim("c", "gpu.nvidia.com", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := n.Serve(ctx, p, draplugin.StartConfig{NoHealthMonitor: true}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	resp, err := srv.Prepare(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Claims[string(c.UID)]
	dev := c.Status.Allocation.Devices.Results[0].Device
	if r.GetError() != "" || len(r.Devices) != 1 || r.Devices[0].DeviceName != dev ||
		!cmp.Equal(r.Devices[0].CdiDeviceIds, []string{"k8s.gpu.nvidia.com/claim=" + string(c.UID) + "-" + dev}) {
		t.Fatalf("prepare: %v", r)
	}
	if _, err := srv.Unprepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	if specs, _ := n.Specs(); len(specs) != 0 {
		t.Errorf("specs left: %v", specs)
	}
	// A kubelet that expects another driver refuses the plugin.
	_, err = draplugintest.ConnectKubelet(ctx, filepath.Join(n.Dir, "r", "gpu.nvidia.com-reg.sock"), "other.example.com")
	if err == nil || !strings.Contains(err.Error(), `want DRA plugin "other.example.com"`) {
		t.Errorf("ConnectKubelet with the wrong driver: %v", err)
	}
}

// TestCrasherStopsAtTheNthPoint stops a prepare at its second crash point and records what it saw.
func TestCrasherStopsAtTheNthPoint(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "l4x8")
	c, err := n.Allocate(ctx, draplugintest.Claim("c", "gpu.nvidia.com", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	crash := draplugintest.CrashAt(c.UID, 2)
	p, err := n.NewPlugin(ctx, func(cfg *draplugin.Config) { cfg.TestHooks = crash.Hooks() })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := draplugintest.Prepare(ctx, p, c); !errors.Is(err, draplugintest.ErrCrash) {
		t.Fatalf("prepare: %v, want a simulated crash", err)
	}
	if got := crash.Seen(); len(got) != 2 || !slices.Contains(got, testhooks.CrashAfterPrepareStarted) {
		t.Errorf("seen %v", got)
	}
}
