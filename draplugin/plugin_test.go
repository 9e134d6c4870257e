package draplugin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/sharing"
)

// serve starts the plugin's sockets on the env and connects a kubelet.
func serve(t testing.TB, e *env, p *draplugin.Plugin, claims ...*resourceapi.ResourceClaim) *draplugintest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx())
	t.Cleanup(cancel)
	srv, err := e.Serve(ctx, p, draplugin.StartConfig{}, claims...)
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// TestPluginThroughKubeletSockets drives the plugin as kubelet does: registration socket,
// GetInfo, then NodePrepareResources and NodeUnprepareResources on the DRA socket, for an
// exclusive GPU, time-slicing, MPS and a dynamic MIG device.
func TestPluginThroughKubeletSockets(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	claims := []*resourceapi.ResourceClaim{
		e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), ""),
		e.claim(gpudra.GPUDeviceClassName, gpuIndex(1), timeSlicingConfig),
		e.claim(gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig),
		e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 3), ""),
	}
	p := e.plugin()
	srv := serve(t, e, p, claims...)
	dra, client := srv.Kubelet, srv.Client
	ctx := context.Background()

	resp, err := dra.Prepare(ctx, claims...)
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	for _, c := range claims {
		r := resp.Claims[string(c.UID)]
		if r == nil || r.Error != "" {
			t.Fatalf("claim %s: %+v", c.Name, r)
		}
		dev := c.Status.Allocation.Devices.Results[0].Device
		want := &drapbv1.Device{RequestNames: []string{"gpu"}, PoolName: e.Name, DeviceName: dev,
			CdiDeviceIds: []string{fmt.Sprintf("k8s.gpu.nvidia.com/claim=%s-%s", c.UID, dev)}}
		if len(r.Devices) != 1 || !cmp.Equal(r.Devices[0].String(), want.String()) {
			t.Errorf("claim %s devices = %v, want %v", c.Name, r.Devices, want)
		}
	}
	if got := e.specs(); len(got) != len(claims) {
		t.Errorf("specs = %v, want one per claim", got)
	}
	mn, err := gpudra.ParseMIGDeviceName(claims[3].Status.Allocation.Devices.Results[0].Device)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.MIGInstances(); !cmp.Equal(got, []string{fmt.Sprintf("3:1g.5gb@%d", mn.PlacementStart)}) {
		t.Errorf("MIG instances = %v", got)
	}
	st := e.Host.State()
	if st.TimeSlices[e.Inventory.GPUs[1].UUID] != 3 || st.ComputeModes[e.Inventory.GPUs[2].UUID] != sharing.ComputeModeExclusiveProcess || len(st.Daemons) != 1 {
		t.Errorf("host state after prepare = %+v", st)
	}

	// The kubelet repeats prepare after its own restart: same answer, no new side effects.
	creates := e.Machine.Calls("CreateGpuInstanceWithPlacement")
	resp2, err := dra.Prepare(ctx, claims...)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(resp.String(), resp2.String()); d != "" {
		t.Errorf("repeated prepare differs (-first +second):\n%s", d)
	}
	if got := e.Machine.Calls("CreateGpuInstanceWithPlacement"); got != creates {
		t.Errorf("repeated prepare created MIG instances: %d → %d calls", creates, got)
	}

	uresp, err := dra.Unprepare(ctx, claims...)
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	for _, c := range claims {
		if r := uresp.Claims[string(c.UID)]; r == nil || r.Error != "" {
			t.Errorf("unprepare %s: %+v", c.Name, r)
		}
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("specs left: %v", got)
	}
	if got := e.MIGInstances(); len(got) != 0 {
		t.Errorf("MIG instances left: %v", got)
	}
	if err := e.HostClean(); err != nil {
		t.Error(err)
	}
	// Unprepare of an unknown claim succeeds.
	if _, err := dra.Unprepare(ctx, claims[0]); err != nil {
		t.Errorf("repeated unprepare: %v", err)
	}

	// The slices were published through the helper.
	waitFor(t, func() bool {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) > 0
	}, "ResourceSlices published")
}

// TestPluginPrepareErrorsNameClaimDeviceStep makes MIG creation fail and checks the error and
// that nothing is left behind.
func TestPluginPrepareErrorsNameClaimDeviceStep(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	c := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), "")
	reg := prometheus.NewPedanticRegistry()
	p := e.plugin(withMetrics(reg))
	e.reconcile(p)
	if err := e.Machine.InjectFault("CreateComputeInstance", 1, 3 /* ERROR_NOT_SUPPORTED-like */); err != nil {
		t.Fatal(err)
	}
	_, err := prepareOne(t, p, c)
	dev := c.Status.Allocation.Devices.Results[0].Device
	want := fmt.Sprintf("prepare claim default/%s (%s): device %s: create MIG instance: ", c.Name, c.UID, dev)
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error = %v, want prefix %q", err, want)
	}
	if got := e.MIGInstances(); len(got) != 0 {
		t.Errorf("instances left after failed prepare: %v", got)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("specs left after failed prepare: %v", got)
	}
	if n := counterValue(t, reg, "gpudra_plugin_errors_total", "create MIG instance"); n != 1 {
		t.Errorf("errors_total{step=create MIG instance} = %v, want 1", n)
	}
	// A retry succeeds.
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := gaugeValue(t, reg, "gpudra_plugin_mig_instances"); n != 1 {
		t.Errorf("mig_instances = %v, want 1", n)
	}
	if n := gaugeValue(t, reg, "gpudra_plugin_prepared_claims"); n != 1 {
		t.Errorf("prepared_claims = %v, want 1", n)
	}
	if cnt := histogramCount(t, reg, "gpudra_plugin_prepare_duration_seconds"); cnt != 2 {
		t.Errorf("prepare_duration_seconds count = %d, want 2", cnt)
	}

	// Bad UIDs are refused before any path is built.
	bad := c.DeepCopy()
	bad.UID = "../../etc"
	if _, err := prepareOne(t, p, bad); err == nil || !strings.Contains(err.Error(), "validate claim") {
		t.Errorf("bad UID: %v", err)
	}
	// Results of other drivers are skipped.
	other := c.DeepCopy()
	other.UID = draplugintest.UID("other")
	other.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
	if devs, err := prepareOne(t, p, other); err != nil || len(devs) != 0 {
		t.Errorf("foreign claim: %v, %v", devs, err)
	}
}

func counterValue(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func gaugeValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func histogramCount(t testing.TB, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// TestPluginConcurrentPrepareUnprepare runs 1000 claims over the 8 GPUs of a DGX concurrently:
// each is prepared, checked and unprepared (some twice) while the others run. Claims share GPUs
// through share IDs, with exclusive or time-slicing configs. As on a real node, where kubelet's
// max-pods (110) bounds the claims prepared at once, at most 110 claims are prepared at a time;
// all 1000 goroutines start together and contend for the GPU locks. The node must end clean.
func TestPluginConcurrentPrepareUnprepare(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin()
	e.reconcile(p)
	const n = 1000
	claims := make([]*resourceapi.ResourceClaim, n)
	for i := range claims {
		g := i % 8
		share := types.UID(fmt.Sprintf("share-%d", i))
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i), Namespace: "default", UID: draplugintest.UID(fmt.Sprintf("c-%d", i))},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: gpudra.DefaultDriverName, Pool: e.Name,
					Device: gpudra.GPUDeviceName(e.Inventory.GPUs[g].Minor), ShareID: &share}}}}},
		}
		if g%2 == 1 { // odd GPUs time-slice, with the same interval for every claim on them
			c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
				Requests: []string{"gpu"}, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: gpudra.DefaultDriverName, Parameters: runtime.RawExtension{Raw: []byte(timeSlicingConfig)}}}}}
		}
		claims[i] = c
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	report := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	pods := make(chan struct{}, 110)
	for i, c := range claims {
		wg.Go(func() {
			pods <- struct{}{}
			defer func() { <-pods }()
			devs, err := prepareOne(t, p, c)
			if err != nil {
				report(err)
				return
			}
			want := fmt.Sprintf("k8s.gpu.nvidia.com/claim=%s-%s", c.UID, c.Status.Allocation.Devices.Results[0].Device)
			if len(devs) != 1 || devs[0].CDIDeviceIDs[0] != want {
				report(fmt.Errorf("claim %s: devices %+v", c.Name, devs))
			}
			if i%10 == 0 { // repeated prepare is idempotent
				if again, err := prepareOne(t, p, c); err != nil || !cmp.Equal(again, devs) {
					report(fmt.Errorf("claim %s: repeated prepare %+v, %v", c.Name, again, err))
				}
			}
			if err := unprepareOne(t, p, c); err != nil {
				report(err)
			}
			if i%10 == 5 { // repeated unprepare succeeds
				if err := unprepareOne(t, p, c); err != nil {
					report(err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d concurrent prepare+unprepare over 8 GPUs in %v", n, time.Since(start))
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("%d specs left", len(got))
	}
	if err := e.HostClean(); err != nil {
		t.Error(err)
	}
	rep, err := e.plugin().Reconcile(context.Background())
	if err != nil || rep.Prepared != 0 || len(rep.RolledBack) != 0 {
		t.Errorf("after the run: %v, %v", rep, err)
	}
}
