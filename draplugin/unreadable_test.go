package draplugin_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/gpu/gputest"
)

// TestUnreadableGPUIsNotAbsent (issue 28, defect 6): a GPU that fails to enumerate at a
// restart, in the same boot, is left out of the node, but the static-MIG claim prepared on it
// and its CDI spec (which a running pod uses) are kept, not forgotten as if the device had
// vanished. Once the GPU answers again, the claim is served as before.
func TestUnreadableGPUIsNotAbsent(t *testing.T) {
	for _, tc := range []struct {
		name string
		// method and n: the nth call of method, counted from the restart, fails: one of GPU 1 (GPU
		// 0 reads its MIG mode once, and has two MIG devices).
		method string
		n      int
		ret    nvml.Return
		// op is the NVML call the metric names; uuidRead says the GPU's UUID was read first.
		op       string
		uuidRead bool
	}{
		{"MIG mode unreadable", "Device.GetMigMode", 2, nvml.ERROR_UNKNOWN, "GetMigMode", true},
		{"MIG device unreadable", "MIGDeviceHandle.GetUUID", 3, nvml.ERROR_GPU_IS_LOST, "GetUUID", true},
		{"GPU lost before its UUID", "Device.GetUUID", 2, nvml.ERROR_GPU_IS_LOST, "GetUUID", false},
		{"no permission", "Device.GetMigMode", 2, nvml.ERROR_NO_PERMISSION, "GetMigMode", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", false, gputest.WithMIG(0, "3g.20gb", "3g.20gb"), gputest.WithMIG(1, "3g.20gb", "3g.20gb"))
			p := e.plugin()
			e.reconcile(p)
			onGPU1 := e.claim(gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 1", "")
			onGPU0 := e.claim(gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 0", "")
			want := prepareAll(t, p, onGPU1, onGPU0)

			if err := e.Machine.InjectFault(tc.method, tc.n, tc.ret); err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			p2 := e.plugin(withMetrics(reg))
			if got := p2.Inventory().Errors; len(got) != 1 || got[0].Index != 1 {
				t.Fatalf("enumeration errors = %v, want one, for GPU 1", got)
			}
			uuid := ""
			if tc.uuidRead {
				uuid, _ = e.Machine.Device(1).GetUUID()
			}
			wantMetric := fmt.Sprintf(`# HELP %[1]s 1 for each GPU that failed to enumerate (NVML call op returned return) and is not served; claims prepared on it are kept.
# TYPE %[1]s gauge
%[1]s{index="1",op=%[2]q,return=%[3]q,uuid=%[4]q} 1
`, draplugin.MetricGPUEnumerationFailures, tc.op, tc.ret.String(), uuid)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(wantMetric), draplugin.MetricGPUEnumerationFailures); err != nil {
				t.Error(err)
			}
			rep := e.reconcile(p2)
			if len(rep.Forgotten) != 0 {
				t.Errorf("forgot %v: a GPU that could not be read is not a GPU that is gone", rep.Forgotten)
			}
			if diff := cmp.Diff([]string{claimRefOf(onGPU1)}, rep.Unreadable); diff != "" {
				t.Errorf("ReconcileReport.Unreadable (-want +got):\n%s", diff)
			}
			sorted := cmpopts.SortSlices(func(a, b string) bool { return a < b })
			if diff := cmp.Diff([]string{string(onGPU1.UID), string(onGPU0.UID)}, e.specs(), sorted); diff != "" {
				t.Errorf("CDI specs after the restart (-want +got):\n%s", diff)
			}
			if rep.Prepared != 2 {
				t.Errorf("%d claims prepared after the restart, want 2 (%v)", rep.Prepared, rep)
			}

			// The GPU answers again: the next start serves the claim as it was.
			e.Machine.ClearFaults()
			p3 := e.plugin()
			if rep := e.reconcile(p3); len(rep.Forgotten)+len(rep.Unreadable) != 0 || rep.Prepared != 2 {
				t.Errorf("after the GPU recovered: %v, want both claims prepared and none forgotten", rep)
			}
			checkPrepared(t, e, p3, want, []*resourceapi.ResourceClaim{onGPU1, onGPU0})
			checkGrantsCurrentInstance(t, e, onGPU1)
		})
	}
}

// TestRequireAllGPUs: by default a GPU that fails to enumerate is left out and the node
// serves; RequireAllGPUs refuses to start instead, with an error naming the GPU and the call.
func TestRequireAllGPUs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		require bool
		wantErr bool
	}{
		{"default: degrade", false, false},
		{"RequireAllGPUs", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "l4x8", false)
			if err := e.Machine.InjectFault("Device.GetName", 3, nvml.ERROR_NOT_SUPPORTED); err != nil {
				t.Fatal(err)
			}
			p, err := e.NewPlugin(e.ctx(), func(c *draplugin.Config) { c.RequireAllGPUs = tc.require })
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "gpu 2") || !strings.Contains(err.Error(), "GetName") {
					t.Fatalf("New = %v, want an error naming GPU 2 and GetName", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var served []int
			for _, g := range p.Inventory().GPUs {
				served = append(served, g.Index)
			}
			if diff := cmp.Diff([]int{0, 1, 3, 4, 5, 6, 7}, served); diff != "" {
				t.Errorf("GPUs served (-want +got):\n%s", diff)
			}
		})
	}
}

// publishedGPUs are the indexes of the GPUs the pool has devices of: whole GPUs by their
// "index" attribute, MIG devices and partitions by "parentIndex".
func publishedGPUs(t *testing.T, pool *gpudra.Pool) []int64 {
	t.Helper()
	rs, err := gpudra.ResourceSlices(gpudra.DefaultDriverName, draplugintest.DefaultNodeName, pool)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			for _, a := range []resourceapi.QualifiedName{"index", "parentIndex"} {
				if v, ok := d.Attributes[a]; ok && v.IntValue != nil && !slices.Contains(out, *v.IntValue) {
					out = append(out, *v.IntValue)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestPublishWithoutAnUnlistableGPU: with dynamic MIG, a GPU whose MIG instances cannot be
// listed when the slices are built is left out of them, and the rest of the node is published
// (issue 28, "degrade, never refuse the node").
func TestPublishWithoutAnUnlistableGPU(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	p := e.plugin()
	e.reconcile(p)
	e.Machine.Device(1).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_UNKNOWN }
	pool, err := p.Resources(e.ctx())
	if err != nil {
		t.Fatalf("Resources: %v", err)
	}
	if diff := cmp.Diff([]int64{0, 2, 3, 4, 5, 6, 7}, publishedGPUs(t, pool)); diff != "" {
		t.Errorf("GPUs published (-want +got):\n%s", diff)
	}
}

// TestUnprepareOnAnUnreadableGPU: a claim kept because its GPU could not be read is still
// unprepared when kubelet asks (its pod ended): its spec and entry go, and nothing is left to
// the next start. A repeated prepare is refused until the GPU can be read again.
func TestUnprepareOnAnUnreadableGPU(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false, gputest.WithMIG(0, "3g.20gb", "3g.20gb"), gputest.WithMIG(1, "3g.20gb", "3g.20gb"))
	p := e.plugin()
	e.reconcile(p)
	c := e.claim(gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 1", "")
	prepareAll(t, p, c)
	if err := e.Machine.InjectFault("Device.GetUUID", 2, nvml.ERROR_GPU_IS_LOST); err != nil {
		t.Fatal(err)
	}
	p2 := e.plugin()
	if rep := e.reconcile(p2); len(rep.Unreadable) != 1 {
		t.Fatalf("reconcile: %v, want the claim kept as unreadable", rep)
	}
	if _, err := prepareOne(t, p2, c); err == nil {
		t.Error("a repeated prepare on the unreadable GPU succeeded")
	}
	if err := unprepareOne(t, p2, c); err != nil {
		t.Fatalf("unprepare: %v", err)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("CDI specs after unprepare: %v", got)
	}
	e.Machine.ClearFaults()
	if rep := e.reconcile(e.plugin()); rep.Prepared != 0 || len(rep.Forgotten)+len(rep.Unreadable) != 0 {
		t.Errorf("next start: %v, want nothing prepared or kept", rep)
	}
}
