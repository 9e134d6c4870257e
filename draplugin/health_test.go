package draplugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/gpu/gputest"
)

// TestHealthRecovers: a device tainted by NVML events is untainted once the events stop for
// the recovery window (each new event restarts it), a lost GPU once it answers again, and a
// negative window keeps event taints until MarkHealthy.
func TestHealthRecovers(t *testing.T) {
	const window = 300 * time.Millisecond
	cases := []struct {
		name   string
		window time.Duration
		// fault breaks GPU 2 (or a MIG device of it); heal undoes what needs undoing.
		fault func(e *env) error
		heal  func(e *env) error
		// recovers says whether the taint goes away by itself.
		recovers bool
	}{
		{name: "xid quiet for the window", window: window, recovers: true,
			fault: func(e *env) error { return e.Machine.InjectXID(2, 79) }},
		{name: "xid with a negative window stays", window: -1, recovers: false,
			fault: func(e *env) error { return e.Machine.InjectXID(2, 79) }},
		{name: "lost gpu answers again", window: -1, recovers: true,
			fault: func(e *env) error { return e.Machine.InjectGPULost(2) },
			heal:  func(e *env) error { return e.Machine.RecoverGPU(2) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", false)
			p := e.plugin(withHealth(draplugin.HealthConfig{ReportInterval: time.Hour, EventWait: 20 * time.Millisecond, RecoveryWindow: c.window}))
			serve(t, e, p)
			u := e.Inventory.GPUs[2].UUID
			if err := c.fault(e); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return p.Unhealthy()[u] != "" }, "GPU 2 tainted")
			if c.heal != nil {
				if err := c.heal(e); err != nil {
					t.Fatal(err)
				}
			}
			if !c.recovers {
				time.Sleep(3 * window)
				if got := p.Unhealthy()[u]; got == "" {
					t.Fatalf("GPU 2 recovered by itself; want its taint kept until MarkHealthy")
				}
				return
			}
			waitFor(t, func() bool { return p.Unhealthy()[u] == "" }, "GPU 2 recovered")
			if taints := taintsOf(t, p, gpudra.GPUDeviceName(e.Inventory.GPUs[2].Minor)); len(taints) != 0 {
				t.Errorf("taints after recovery: %+v", taints)
			}
		})
	}
}

// TestHealthEventsRestartTheRecoveryWindow: XIDs that keep coming keep the taint, however
// long ago the first one was.
func TestHealthEventsRestartTheRecoveryWindow(t *testing.T) {
	const window = 400 * time.Millisecond
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin(withHealth(draplugin.HealthConfig{ReportInterval: time.Hour, EventWait: 20 * time.Millisecond, RecoveryWindow: window}))
	serve(t, e, p)
	u := e.Inventory.GPUs[2].UUID
	start := time.Now()
	for time.Since(start) < 3*window {
		if err := e.Machine.InjectXID(2, 79); err != nil {
			t.Fatal(err)
		}
		time.Sleep(window / 8)
		if p.Unhealthy()[u] == "" && time.Since(start) > window/4 {
			t.Fatalf("GPU 2 untainted %v after the first XID while XIDs keep coming every %v", time.Since(start), window/8)
		}
	}
	waitFor(t, func() bool { return p.Unhealthy()[u] == "" }, "GPU 2 recovered once the XIDs stopped")
}

// TestHealthMIGXIDRecoversAlone: an XID that names a MIG device taints that device only (not
// its parent or its sibling), and it recovers after the window.
func TestHealthMIGXIDRecoversAlone(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false, gputest.WithMIG(1, "3g.20gb", "3g.20gb"))
	p := e.plugin(withHealth(draplugin.HealthConfig{ReportInterval: time.Hour, EventWait: 20 * time.Millisecond, RecoveryWindow: 300 * time.Millisecond}))
	serve(t, e, p)
	migs := e.Inventory.GPUs[1].MIGDevices
	if len(migs) != 2 {
		t.Fatalf("GPU 1 has %d MIG devices, want 2", len(migs))
	}
	bad := &migs[0]
	if err := e.Machine.InjectMIGXID(1, uint32(bad.GIID), uint32(bad.CIID), 94); err != nil {
		t.Fatal(err)
	}
	name := gpudra.MIGDeviceNameOf(bad)
	waitFor(t, func() bool { return len(p.Unhealthy()) > 0 }, "a MIG device tainted")
	if diff := cmp.Diff(map[string]string{name: "xid-94"}, p.Unhealthy()); diff != "" {
		t.Errorf("unhealthy (-want +got):\n%s", diff)
	}
	if taints := taintsOf(t, p, gpudra.MIGDeviceNameOf(&migs[1])); len(taints) != 0 {
		t.Errorf("the sibling MIG device is tainted: %+v", taints)
	}
	waitFor(t, func() bool { return len(p.Unhealthy()) == 0 }, "the MIG device recovered")
	if taints := taintsOf(t, p, name); len(taints) != 0 {
		t.Errorf("taints of %s after recovery: %+v", name, taints)
	}
}

// TestHealthTaintEffect: the configured effect is what the published taints carry, and an
// effect the API does not know is refused when the plugin is built.
func TestHealthTaintEffect(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin(withHealth(draplugin.HealthConfig{ReportInterval: time.Hour, EventWait: 20 * time.Millisecond, TaintEffect: resourceapi.DeviceTaintEffectNoExecute}))
	serve(t, e, p)
	if err := e.Machine.InjectXID(3, 48); err != nil {
		t.Fatal(err)
	}
	u := e.Inventory.GPUs[3].UUID
	waitFor(t, func() bool { return p.Unhealthy()[u] != "" }, "GPU 3 tainted")
	want := []resourceTaint{{Key: "gpu.nvidia.com/unhealthy", Value: "xid-48", Effect: "NoExecute"}}
	if diff := cmp.Diff(want, taintsOf(t, p, gpudra.GPUDeviceName(e.Inventory.GPUs[3].Minor))); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}

	_, err := e.NewPlugin(e.ctx(), withHealth(draplugin.HealthConfig{TaintEffect: "Evict"}))
	if err == nil || !strings.Contains(err.Error(), "Health.TaintEffect") || !strings.Contains(err.Error(), "NoExecute") {
		t.Errorf("New with TaintEffect Evict: %v; want an error naming Health.TaintEffect and the allowed values", err)
	}
}

// TestHealthOfAGPUWhoseEventsAreNotWatched: when the monitor cannot get a GPU's XID and ECC
// events (reading the supported events or registering for them fails), an XID there goes unseen:
// kubelet must be told the GPU's devices are Unknown, not Healthy. The other GPUs stay Healthy.
// Found by review.
func TestHealthOfAGPUWhoseEventsAreNotWatched(t *testing.T) {
	for _, call := range []string{"GetSupportedEventTypes", "RegisterEvents"} {
		t.Run(call, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", false)
			if err := e.Machine.InjectFault(call, 1, nvml.ERROR_UNKNOWN); err != nil { // the first GPU's call
				t.Fatal(err)
			}
			p := e.plugin(withHealth(draplugin.HealthConfig{ReportInterval: time.Hour, EventWait: 20 * time.Millisecond}))
			serve(t, e, p)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reports := make(chan kubeletplugin.DeviceHealthReport, 10)
			go func() { _ = p.WatchHealthStatus(ctx, reports) }()
			r := <-reports
			first, second := gpudra.GPUDeviceName(e.Inventory.GPUs[0].Minor), gpudra.GPUDeviceName(e.Inventory.GPUs[1].Minor)
			if h := healthOf(r, first); h.Health != kubeletplugin.HealthStatusUnknown || !strings.Contains(h.Message, "not watched") {
				t.Errorf("%s, whose events are not watched: %+v, want Unknown saying so", first, h)
			}
			if h := healthOf(r, second); h.Health != kubeletplugin.HealthStatusHealthy {
				t.Errorf("%s, watched: %+v, want Healthy", second, h)
			}
		})
	}
}
