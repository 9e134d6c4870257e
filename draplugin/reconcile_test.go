package draplugin_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/mig"
)

// TestReconcileRewritesSpecsLostWithTmpfs removes the CDI directory (a tmpfs /var/run/cdi after
// a reboot or a remount) and checks that a restarted plugin writes the specs of prepared claims
// again, byte for byte, and removes specs nobody owns.
func TestReconcileRewritesSpecsLostWithTmpfs(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	cs := bystanders(e)
	p := e.plugin()
	e.reconcile(p)
	prepareAll(t, p, cs...)
	before := map[string][]byte{}
	for _, uid := range e.specs() {
		b, err := os.ReadFile(filepath.Join(e.CDIDir, "k8s.gpu.nvidia.com-claim_"+uid+".json"))
		if err != nil {
			t.Fatal(err)
		}
		before[uid] = b
	}
	if err := os.RemoveAll(e.CDIDir); err != nil {
		t.Fatal(err)
	}
	// An orphan spec, as a crashed plugin that lost its checkpoint would leave.
	orphan := string(draplugintest.UID("orphan"))
	if err := os.MkdirAll(e.CDIDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.CDIDir, "k8s.gpu.nvidia.com-claim_"+orphan+".json"), before[string(cs[0].UID)], 0o644); err != nil {
		t.Fatal(err)
	}
	rep := e.reconcile(e.plugin())
	if len(rep.SpecsRewritten) != 2 || !cmp.Equal(rep.SpecsPruned, []string{orphan}) {
		t.Errorf("report = %v, rewritten %v, pruned %v", rep, rep.SpecsRewritten, rep.SpecsPruned)
	}
	for uid, b := range before {
		got, err := os.ReadFile(filepath.Join(e.CDIDir, "k8s.gpu.nvidia.com-claim_"+uid+".json"))
		if err != nil || string(got) != string(b) {
			t.Errorf("spec of %s not restored identically: %v", uid, err)
		}
	}
}

// TestReconcileAfterReboot: every claim prepared before a reboot is forgotten, whether the
// reboot erased its state (a dynamic MIG instance) or not (a full GPU), and its spec removed;
// kubelet prepares each again, from scratch.
func TestReconcileAfterReboot(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	mig := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), "")
	plain := e.claim(gpudra.GPUDeviceClassName, gpuIndex(1), "")
	p := e.plugin()
	prepareAll(t, p, mig, plain)
	// Reboot: new boot ID, MIG instances gone; the CDI directory keeps its specs, as one on a
	// disk would.
	specs := readSpecs(t, e)
	if err := e.Reboot(); err != nil {
		t.Fatal(err)
	}
	writeSpecs(t, e, specs)
	p2 := e.plugin()
	rep := e.reconcile(p2)
	want := []string{claimRefOf(mig), claimRefOf(plain)}
	if diff := cmp.Diff(want, rep.Forgotten, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" || !rep.Checkpoint.Rebooted || rep.Prepared != 0 {
		t.Fatalf("report %v: forgotten (-want +got):\n%s", rep, diff)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("specs after the reboot = %v, want none", got)
	}
	// kubelet prepares both again: the instance is recreated, both specs written.
	prepareAll(t, p2, mig, plain)
	if len(e.MIGInstances()) != 1 {
		t.Errorf("instances = %v", e.MIGInstances())
	}
	if diff := cmp.Diff([]string{string(mig.UID), string(plain.UID)}, e.specs(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("specs after kubelet's prepares (-want +got):\n%s", diff)
	}
}

// TestReconcileMIGBaseline: with dynamic MIG, instances that existed before the plugin first
// ran in this boot are kept; an instance nobody owns that appeared later is a leak and is
// destroyed while the checkpoint can be trusted, and kept and reported (never destroyed for lack
// of a record) when the checkpoint was lost.
func TestReconcileMIGBaseline(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true, gputest.WithMIG(5, "3g.20gb"))
	rep := e.reconcile(e.plugin())
	if len(rep.MIGBaseline) != 1 || len(rep.MIGDestroyed) != 0 {
		t.Fatalf("first start: %v", rep)
	}
	leak := func() {
		ctl := draplugin.NewNVMLMIGController(e.Machine, nil)
		if _, err := ctl.Create(context.Background(), e.Inventory.GPUs[4].UUID, "1g.5gb", mig.Placement{Start: 6, Size: 1}); err != nil {
			t.Fatal(err)
		}
	}
	preExisting := e.MIGInstances()
	leak()
	rep = e.reconcile(e.plugin())
	if len(rep.MIGDestroyed) != 1 || len(rep.MIGBaseline) != 1 || !cmp.Equal(e.MIGInstances(), preExisting) {
		t.Fatalf("leak with a trusted checkpoint: %v destroyed %v, instances %v", rep, rep.MIGDestroyed, e.MIGInstances())
	}
	leak()
	if err := os.WriteFile(filepath.Join(e.StateDir, "checkpoint.json"), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep = e.reconcile(e.plugin())
	if !rep.Checkpoint.Corrupt || len(rep.MIGDestroyed) != 0 || len(rep.MIGUnowned) != 1 || len(e.MIGInstances()) != 2 {
		t.Fatalf("unowned instance after a corrupt checkpoint: %v destroyed %v unowned %v, instances %v", rep, rep.MIGDestroyed, rep.MIGUnowned, e.MIGInstances())
	}
	rep = e.reconcile(e.plugin())
	if len(rep.MIGDestroyed) != 0 || len(rep.MIGBaseline) != 2 || len(e.MIGInstances()) != 2 {
		t.Errorf("the next start destroyed the instance kept for lack of a record: %v destroyed %v", rep, rep.MIGDestroyed)
	}
}

// TestPluginHealth injects XIDs and a lost GPU: benign XIDs change nothing, a fatal XID taints
// the GPU's devices in the published resources and makes WatchHealthStatus report them
// unhealthy, MarkHealthy clears it, and a lost GPU is tainted too.
func TestPluginHealth(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin(withHealth(draplugin.HealthConfig{ReportInterval: time.Hour, EventWait: 20 * time.Millisecond}))
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(2), "")
	serve(t, e, p, c)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport, 10)
	go func() { _ = p.WatchHealthStatus(ctx, reports) }()
	first := <-reports
	if len(first.Devices) != 8 || first.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first report: %+v", first)
	}

	if err := e.Machine.InjectXID(2, 43); err != nil { // benign
		t.Fatal(err)
	}
	if err := e.Machine.InjectXID(2, 79); err != nil { // fallen off the bus
		t.Fatal(err)
	}
	rep := <-reports
	dev := gpudra.GPUDeviceName(e.Inventory.GPUs[2].Minor)
	if h := healthOf(rep, dev); h.Health != kubeletplugin.HealthStatusUnhealthy {
		t.Errorf("%s health = %+v", dev, h)
	}
	if got := p.Unhealthy(); !cmp.Equal(got, map[string]string{e.Inventory.GPUs[2].UUID: "xid-79"}) {
		t.Errorf("Unhealthy() = %v (the benign XID 43 must not count)", got)
	}
	if taints := taintsOf(t, p, dev); len(taints) != 1 || taints[0].Key != "gpu.nvidia.com/unhealthy" || taints[0].Value != "xid-79" || taints[0].Effect != "NoSchedule" {
		t.Errorf("taints of %s = %+v", dev, taints)
	}
	if err := p.MarkHealthy(ctx, dev); err != nil {
		t.Fatal(err)
	}
	if h := healthOf(<-reports, dev); h.Health != kubeletplugin.HealthStatusHealthy {
		t.Errorf("after MarkHealthy: %+v", h)
	}
	if taints := taintsOf(t, p, dev); len(taints) != 0 {
		t.Errorf("taints after MarkHealthy: %+v", taints)
	}
	if err := e.Machine.InjectGPULost(5); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p.Unhealthy()[e.Inventory.GPUs[5].UUID] == "gpu-lost" }, "GPU 5 marked lost")
	if h := healthOf(<-reports, gpudra.GPUDeviceName(e.Inventory.GPUs[5].Minor)); h.Health != kubeletplugin.HealthStatusUnhealthy {
		t.Errorf("lost GPU: %+v", h)
	}
}

func healthOf(r kubeletplugin.DeviceHealthReport, dev string) kubeletplugin.DeviceHealth {
	i := slices.IndexFunc(r.Devices, func(d kubeletplugin.DeviceHealth) bool { return d.DeviceName == dev })
	if i < 0 {
		return kubeletplugin.DeviceHealth{}
	}
	return r.Devices[i]
}

func taintsOf(t *testing.T, p *draplugin.Plugin, dev string) []resourceTaint {
	t.Helper()
	res, err := p.Resources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Slices {
		for _, d := range s.Devices {
			if d.Name == dev {
				var out []resourceTaint
				for _, tt := range d.Taints {
					out = append(out, resourceTaint{tt.Key, tt.Value, string(tt.Effect)})
				}
				return out
			}
		}
	}
	t.Fatalf("device %s not published", dev)
	return nil
}

type resourceTaint struct{ Key, Value, Effect string }

// TestReconcileAfterUpgradeFromCheckpointVersion1: a driver that wrote checkpoint version 1 (no
// boot ID) is replaced by this one without a reboot, as a DaemonSet update does. Its prepared
// claims' pods still run and kubelet will not prepare them again: the claims must be kept, with
// their specs, and unprepare as usual.
func TestReconcileAfterUpgradeFromCheckpointVersion1(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(1), "")
	p := e.plugin()
	e.reconcile(p)
	devs, err := prepareOne(t, p, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	writeCheckpointV1(t, e.StateDir, map[string]any{string(c.UID): map[string]any{
		"namespace": c.Namespace, "name": c.Name, "devices": []string{devs[0].DeviceName}, "cdiDeviceIDs": devs[0].CDIDeviceIDs}})
	p2 := e.plugin()
	rep := e.reconcile(p2)
	if rep.Checkpoint.Migrated == 0 || len(rep.Forgotten) > 0 || len(rep.SpecsPruned) > 0 || rep.Prepared != 1 {
		t.Errorf("report %v: want the checkpoint migrated and its claim kept (forgotten %v, specs pruned %v)", rep, rep.Forgotten, rep.SpecsPruned)
	}
	if !slices.Contains(e.specs(), string(c.UID)) {
		t.Errorf("the CDI spec of the claim is gone: %v", e.specs())
	}
	if err := unprepareOne(t, p2, c); err != nil {
		t.Fatalf("unprepare after the upgrade: %v", err)
	}
	if got := e.specs(); len(got) > 0 {
		t.Errorf("specs after unprepare: %v", got)
	}
}

// writeCheckpointV1 writes the state directory's checkpoint as version 1 wrote it: the claims
// under "preparedClaims", the checksum over the compact JSON of the data.
func writeCheckpointV1(t *testing.T, stateDir string, claims map[string]any) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"preparedClaims": claims})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data) // json.Marshal output is compact
	file := fmt.Appendf(nil, `{"version":1,"checksum":"sha256:%x","data":%s}`, sum, data)
	if err := os.WriteFile(filepath.Join(stateDir, checkpoint.FileName), file, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMIGBaselineTemporaries: the MIG baseline is written under every GPU lock, not the
// checkpoint's, so another plugin process opening its checkpoint meanwhile (a rolling update)
// must leave the baseline's temporary file alone; reconciliation, holding every GPU lock, removes
// one that a crash left behind.
func TestMIGBaselineTemporaries(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	tmp := filepath.Join(e.StateDir, atomicfile.TempPrefix+draplugin.MIGBaselineFile+"-4242")
	if err := os.MkdirAll(e.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := e.plugin()
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("opening the plugin's checkpoint removed the baseline's temporary file: %v", err)
	}
	e.reconcile(p)
	if _, err := os.Stat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("reconciliation left the baseline's temporary file: %v", err)
	}
}

// TestMIGBaselineOfAGPUThatFailedToList: at the plugin's first start in a boot, listing one GPU's
// MIG instances fails (a transient NVML error). That GPU's instances, there before the plugin
// ran, are not in the baseline then; the next start, with a trusted checkpoint, must take them
// into it, not destroy them as leaks. Found by review.
func TestMIGBaselineOfAGPUThatFailedToList(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true, gputest.WithMIG(5, "3g.20gb"))
	preExisting := e.MIGInstances()
	p := e.plugin()
	// GetGpuInstanceById is reached only through GPU 5's MIG device.
	if err := e.Machine.InjectFault("GetGpuInstanceById", 1, nvml.ERROR_UNKNOWN); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reconcile(e.ctx()); err == nil || !strings.Contains(err.Error(), "list MIG instances") {
		t.Fatalf("first start: %v, want the listing error", err)
	}
	e.Machine.ClearFaults()
	rep := e.reconcile(e.plugin())
	if len(rep.MIGDestroyed) != 0 || len(rep.MIGBaseline) != 1 || !cmp.Equal(e.MIGInstances(), preExisting) {
		t.Errorf("next start: destroyed %v, baseline %v; instances %v, want %v kept", rep.MIGDestroyed, rep.MIGBaseline, e.MIGInstances(), preExisting)
	}
	// From now on the GPU is covered: a leak there is destroyed.
	ctl := draplugin.NewNVMLMIGController(e.Machine, nil)
	if _, err := ctl.Create(context.Background(), e.Inventory.GPUs[5].UUID, "1g.5gb", mig.Placement{Start: 6, Size: 1}); err != nil {
		t.Fatal(err)
	}
	if rep := e.reconcile(e.plugin()); len(rep.MIGDestroyed) != 1 || !cmp.Equal(e.MIGInstances(), preExisting) {
		t.Errorf("leak on the GPU after its baseline: destroyed %v, instances %v", rep.MIGDestroyed, e.MIGInstances())
	}
}
