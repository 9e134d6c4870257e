package draplugin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
)

// counters returns the non-zero series of a counter vector, keyed by their labels as
// "name=value,name=value" (sorted by name); it fails when the metric is not registered.
func counters(t testing.TB, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if v := m.GetCounter().GetValue(); v != 0 {
				out[strings.Join(labels, ",")] = v
			}
		}
		return out
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

// seriesOf returns the label values of every series of a metric, zeros included.
func seriesOf(t testing.TB, reg *prometheus.Registry, name, label string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == name && l.GetName() == label && !slices.Contains(out, l.GetValue()) {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestHealthEventsMetric: every health transition the plugin applies counts once in
// gpudra_plugin_health_events_total, by the state entered and the class of the taint set or
// removed; repeating the current state counts nothing.
func TestHealthEventsMetric(t *testing.T) {
	const gpu = 2
	cases := []struct {
		name string
		// fault makes GPU 2 unhealthy; the test waits for its taint.
		fault func(e *env, p *draplugin.Plugin) error
		// heal makes it healthy again; the test waits for the taint to go.
		heal func(e *env, p *draplugin.Plugin) error
		want map[string]float64
	}{
		{name: "xid then MarkHealthy",
			fault: func(e *env, _ *draplugin.Plugin) error { return e.Machine.InjectXID(gpu, 79) },
			heal: func(e *env, p *draplugin.Plugin) error {
				return p.MarkHealthy(context.Background(), e.Inventory.GPUs[gpu].UUID)
			},
			want: map[string]float64{"reason=xid,state=unhealthy": 1, "reason=xid,state=healthy": 1}},
		{name: "ecc error then MarkHealthy of a device name",
			fault: func(e *env, _ *draplugin.Plugin) error {
				return e.Machine.InjectEvent(gpu, nvml.EventData{EventType: nvml.EventTypeDoubleBitEccError, GpuInstanceId: ^uint32(0), ComputeInstanceId: ^uint32(0)})
			},
			heal: func(e *env, p *draplugin.Plugin) error {
				return p.MarkHealthy(context.Background(), gpudra.GPUDeviceName(e.Inventory.GPUs[gpu].Minor))
			},
			want: map[string]float64{"reason=ecc-dbe,state=unhealthy": 1, "reason=ecc-dbe,state=healthy": 1}},
		{name: "lost gpu answers again",
			fault: func(e *env, _ *draplugin.Plugin) error { return e.Machine.InjectGPULost(gpu) },
			heal:  func(e *env, _ *draplugin.Plugin) error { return e.Machine.RecoverGPU(gpu) },
			want:  map[string]float64{"reason=gpu-lost,state=unhealthy": 1, "reason=gpu-lost,state=healthy": 1}},
		{name: "MarkUnhealthy twice then MarkHealthy twice",
			fault: func(e *env, p *draplugin.Plugin) error {
				u := e.Inventory.GPUs[gpu].UUID
				return errors.Join(p.MarkUnhealthy(context.Background(), u, "fan-failure", "fan 2 stopped"),
					p.MarkUnhealthy(context.Background(), u, "fan-failure", "fan 2 stopped"))
			},
			heal: func(e *env, p *draplugin.Plugin) error {
				u := e.Inventory.GPUs[gpu].UUID
				return errors.Join(p.MarkHealthy(context.Background(), u), p.MarkHealthy(context.Background(), u))
			},
			want: map[string]float64{"reason=marked,state=unhealthy": 1, "reason=marked,state=healthy": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", false)
			reg := prometheus.NewPedanticRegistry()
			// A negative window: the XID and ECC taints stay until MarkHealthy.
			p := e.plugin(withMetrics(reg), withHealth(draplugin.HealthConfig{ReportInterval: time.Hour, EventWait: 20 * time.Millisecond, RecoveryWindow: -1}))
			serve(t, e, p)
			if got := counters(t, reg, draplugin.MetricHealthEvents); len(got) != 0 {
				t.Fatalf("health events before any: %v", got)
			}
			u := e.Inventory.GPUs[gpu].UUID
			if err := c.fault(e, p); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return p.Unhealthy()[u] != "" }, "GPU 2 tainted")
			if err := c.heal(e, p); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return p.Unhealthy()[u] == "" }, "GPU 2 healthy again")
			if diff := cmp.Diff(c.want, counters(t, reg, draplugin.MetricHealthEvents)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", draplugin.MetricHealthEvents, diff)
			}
		})
	}
}

// TestPublishMetric: the first publish of Start counts a success; a republish that fails (the
// checkpoint, which the publish of dynamic MIG partitions reads, is unreadable) counts an error
// for each attempt, retried with back-off, and the retry after the checkpoint is readable again
// counts a success.
func TestPublishMetric(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	reg := prometheus.NewPedanticRegistry()
	p := e.plugin(withMetrics(reg))
	serve(t, e, p)
	if diff := cmp.Diff([]string{"error", "success"}, seriesOf(t, reg, draplugin.MetricPublish, "result")); diff != "" {
		t.Errorf("series of %s (-want +got):\n%s", draplugin.MetricPublish, diff)
	}
	publishes := func() map[string]float64 { return counters(t, reg, draplugin.MetricPublish) }
	if diff := cmp.Diff(map[string]float64{"result=success": 1}, publishes()); diff != "" {
		t.Fatalf("after Start (-want +got):\n%s", diff)
	}

	path := filepath.Join(e.StateDir, "checkpoint.json")
	sound, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, path, []byte("{garbage"))
	if err := p.MarkUnhealthy(context.Background(), "gpu-0", "fan-failure", "republish"); err != nil {
		t.Fatal(err)
	}
	// The retries come after 100ms, 200ms, 400ms...: wait for two failed attempts.
	waitFor(t, func() bool { return publishes()["result=error"] >= 2 }, "two failed publishes")
	if got := publishes()["result=success"]; got != 1 {
		t.Errorf("successes while the checkpoint is unreadable: %v, want the first one only", got)
	}
	replaceFile(t, path, sound)
	waitFor(t, func() bool { return publishes()["result=success"] == 2 }, "the retry succeeds")
	errs := publishes()["result=error"]
	time.Sleep(500 * time.Millisecond)
	if diff := cmp.Diff(map[string]float64{"result=success": 2, "result=error": errs}, publishes()); diff != "" {
		t.Errorf("retries went on after the success (-want +got):\n%s", diff)
	}
}

// replaceFile replaces path with a new file holding data, as another process's write would.
func replaceFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".test-tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointRecoveryMetrics: each plugin counts what opening its checkpoint recovered from
// (gpudra_plugin_checkpoint_recoveries_total) and each reconciliation the claims it repaired,
// by action (gpudra_plugin_reconciled_claims_total).
func TestCheckpointRecoveryMetrics(t *testing.T) {
	cases := []struct {
		name string
		// damage runs on a node where a first plugin prepared a MIG claim and a GPU claim; it
		// may return a claim to prepare with a crash first.
		damage         func(t *testing.T, e *env)
		wantRecoveries map[string]float64
		wantReconciled map[string]float64
	}{
		{name: "sound checkpoint", damage: func(*testing.T, *env) {}},
		{name: "corrupt checkpoint", damage: func(t *testing.T, e *env) {
			replaceFile(t, filepath.Join(e.StateDir, "checkpoint.json"), []byte(`{"version":2,"checksum":"sha256:00","data":{}}`))
		},
			wantRecoveries: map[string]float64{"reason=corrupt": 1},
			wantReconciled: map[string]float64{"action=adopted": 2}},
		{name: "wiped state directory", damage: func(t *testing.T, e *env) {
			if err := os.Remove(filepath.Join(e.StateDir, "checkpoint.json")); err != nil {
				t.Fatal(err)
			}
		},
			wantRecoveries: map[string]float64{"reason=fresh": 1},
			wantReconciled: map[string]float64{"action=adopted": 2}},
		{name: "reboot", damage: func(t *testing.T, e *env) {
			if err := e.Reboot(); err != nil {
				t.Fatal(err)
			}
		},
			wantRecoveries: map[string]float64{"reason=rebooted": 1},
			wantReconciled: map[string]float64{"action=forgotten": 2}},
		{name: "prepare interrupted after creating its MIG instance", damage: func(t *testing.T, e *env) {
			c := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 4), "")
			p := e.plugin(withHooks(draplugintest.CrashAt(c.UID, 2).Hooks()))
			if _, err := prepareOne(t, p, c); !errors.Is(err, draplugintest.ErrCrash) {
				t.Fatalf("prepare with a crash after the MIG instance: %v", err)
			}
		},
			wantReconciled: map[string]float64{"action=rolled_back": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", true)
			first := prometheus.NewPedanticRegistry()
			p := e.plugin(withMetrics(first))
			e.reconcile(p)
			if diff := cmp.Diff(map[string]float64{"reason=fresh": 1}, counters(t, first, draplugin.MetricCheckpointRecoveries)); diff != "" {
				t.Errorf("first start (-want +got):\n%s", diff)
			}
			prepareAll(t, p, e.claim(gpudra.MIGDeviceClassName, migProfileOn("2g.10gb", 1), ""), e.claim(gpudra.GPUDeviceClassName, gpuIndex(3), ""))
			c.damage(t, e)

			reg := prometheus.NewPedanticRegistry()
			e.reconcile(e.plugin(withMetrics(reg)))
			if diff := cmp.Diff(c.wantRecoveries, counters(t, reg, draplugin.MetricCheckpointRecoveries), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s (-want +got):\n%s", draplugin.MetricCheckpointRecoveries, diff)
			}
			if diff := cmp.Diff(c.wantReconciled, counters(t, reg, draplugin.MetricReconciledClaims), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s (-want +got):\n%s", draplugin.MetricReconciledClaims, diff)
			}
			want := []string{"adopted", "forgotten", "not_adopted", "rolled_back", "spec_pruned", "spec_rewritten", "unprepare_finished", "unreadable_kept"}
			if diff := cmp.Diff(want, seriesOf(t, reg, draplugin.MetricReconciledClaims, "action")); diff != "" {
				t.Errorf("series of %s (-want +got):\n%s", draplugin.MetricReconciledClaims, diff)
			}
		})
	}
}
