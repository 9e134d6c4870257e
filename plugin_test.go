package gpudra_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
	"github.com/gpudra/gpudra/simulate"
)

const (
	timeSlicingConfig = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`
	mpsConfig         = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50}}}`
)

// pluginEnv is one simulated node: a fake NVML machine, a fake sharing host, a fake driver root,
// and the plugin's state and CDI directories. Plugins built by newPlugin on the same env share
// all of them, as a restarted plugin process shares the node with the one that crashed.
type pluginEnv struct {
	t        testing.TB
	machine  *gputest.Machine
	inv      *gpu.Inventory
	host     *sharingtest.FakeHost
	stateDir string
	cdiDir   string
	mpsDir   string
	gen      *cdi.Generator
	dynamic  bool
	sim      *simulate.Simulator
	n        int
}

func newPluginEnv(t testing.TB, machine string, dynamic bool, opts ...gputest.Option) *pluginEnv {
	t.Helper()
	m, err := gputest.New(machine, opts...)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := gpu.Enumerate(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, g := range inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	root := cditest.New(t, cditest.Layout{GPUs: len(inv.GPUs)})
	inst, err := cdi.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := cdi.NewGenerator(inst)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &pluginEnv{t: t, machine: m, inv: inv, host: sharingtest.NewFakeHost(uuids...), gen: gen, dynamic: dynamic,
		stateDir: filepath.Join(dir, "state"), cdiDir: filepath.Join(dir, "cdi"), mpsDir: filepath.Join(dir, "mps")}
	var bopts []gpudra.Option
	if dynamic {
		bopts = append(bopts, gpudra.WithDynamicMIG(nil))
	}
	e.sim = simulate.New(testNode, gpudra.DeviceClasses(gpudra.DefaultDriverName), slicesFor(t, inv, bopts...))
	return e
}

// bootID is the kernel boot ID the env's plugins see.
var bootID = "boot-1"

type pluginOpts struct {
	afterStep func(gpudra.PluginStep, types.UID) error
	metrics   prometheus.Registerer
	health    gpudra.HealthConfig
}

// newPlugin starts a plugin "process" on the env: a fresh sharing engine, writer and checkpoint
// store over the env's host, machine and directories.
func (e *pluginEnv) newPlugin(o pluginOpts) *gpudra.Plugin {
	e.t.Helper()
	w, err := cdi.NewWriter(cdi.WithSpecDir(e.cdiDir))
	if err != nil {
		e.t.Fatal(err)
	}
	logger := klog.Background()
	if tt, ok := e.t.(*testing.T); ok && testing.Verbose() {
		logger = ktesting.NewLogger(tt, ktesting.NewConfig(ktesting.Verbosity(2)))
	}
	p, err := gpudra.NewPlugin(gpudra.PluginConfig{
		NodeName: testNode, NVML: e.machine, StateDir: e.stateDir,
		CheckpointOptions: []checkpoint.Option{checkpoint.WithBootID(bootID)},
		CDIGenerator:      e.gen, CDIWriter: w, DynamicMIG: e.dynamic,
		Sharing: sharing.NewManager(sharing.WithTimeSlicer(e.host), sharing.WithComputeModeSetter(e.host),
			sharing.WithMPSDaemons(e.host), sharing.WithMPSRoot(e.mpsDir)),
		AfterStep: o.afterStep, Metrics: o.metrics, Health: o.health, Logger: &logger,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// claim builds a claim for one device of class with an optional CEL selector and opaque config,
// and allocates it with the scheduler's allocator.
func (e *pluginEnv) claim(class, selector, config string) *resourceapi.ResourceClaim {
	e.t.Helper()
	e.n++
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	if selector != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", e.n), Namespace: "default", UID: types.UID(testUID(e.n))},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}
	if config != "" {
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: gpudra.DefaultDriverName, Parameters: runtime.RawExtension{Raw: []byte(config)}}}}}
	}
	allocated, err := e.sim.Allocate(context.Background(), c)
	if err != nil {
		e.t.Fatalf("allocate %s: %v", c.Name, err)
	}
	return allocated
}

func gpuIndex(i int) string { return fmt.Sprintf("device.attributes['gpu.nvidia.com'].index == %d", i) }

func migProfileOn(profile string, i int) string {
	return fmt.Sprintf("device.attributes['gpu.nvidia.com'].profile == '%s' && device.attributes['gpu.nvidia.com'].parentIndex == %d", profile, i)
}

func prepareOne(t testing.TB, p *gpudra.Plugin, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	t.Helper()
	res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatalf("PrepareResourceClaims: %v", err)
	}
	r, ok := res[c.UID]
	if !ok {
		t.Fatalf("no result for claim %s", c.UID)
	}
	return r.Devices, r.Err
}

func unprepareOne(t testing.TB, p *gpudra.Plugin, c *resourceapi.ResourceClaim) error {
	t.Helper()
	res, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{
		NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}})
	if err != nil {
		t.Fatalf("UnprepareResourceClaims: %v", err)
	}
	return res[c.UID]
}

// specs lists the claims with a CDI spec on the env.
func (e *pluginEnv) specs() []string {
	e.t.Helper()
	w, err := cdi.NewWriter(cdi.WithSpecDir(e.cdiDir))
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := w.List()
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// instances lists the MIG instances on all GPUs as "gpuIndex:profile@start".
func (e *pluginEnv) instances() []string {
	var out []string
	for i := 0; i < e.machine.NumGPUs(); i++ {
		for _, gi := range e.machine.GPUInstances(i) {
			out = append(out, fmt.Sprintf("%d:%s@%d", i, gi.Profile, gi.Placement.Start))
		}
	}
	return out
}

// hostClean checks that the sharing host is back to its defaults.
func (e *pluginEnv) hostClean() error {
	st := e.host.State()
	for u, m := range st.ComputeModes {
		if m != sharing.ComputeModeDefault {
			return fmt.Errorf("device %s left in compute mode %s", u, m)
		}
	}
	for u, v := range st.TimeSlices {
		if v != 0 {
			return fmt.Errorf("GPU %s left with time slice %d", u, v)
		}
	}
	if len(st.Daemons) > 0 {
		return fmt.Errorf("MPS daemons left running: %v", st.Daemons)
	}
	return nil
}

// shortTempDir returns a directory with a short path, for AF_UNIX sockets (≤108 bytes).
func shortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "gd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// kubeletConn starts the plugin with the kubelet-plugin helper on short socket directories and
// returns a DRA client dialled the way kubelet does: registration socket, GetInfo, endpoint.
func startWithSockets(t testing.TB, p *gpudra.Plugin, claims ...*resourceapi.ResourceClaim) (drapbv1.DRAPluginClient, *fake.Clientset) {
	t.Helper()
	dir := shortTempDir(t)
	reg, data := filepath.Join(dir, "r"), filepath.Join(dir, "d")
	for _, d := range []string{reg, data} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}}}
	for _, c := range claims {
		objs = append(objs, c)
	}
	client := fake.NewClientset(objs...)
	// The fake API server does not implement generateName; the slice controller needs it.
	var names sync.Mutex
	seq := 0
	client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if s.Name == "" && s.GenerateName != "" {
			names.Lock()
			seq++
			s.Name = fmt.Sprintf("%s%05d", s.GenerateName, seq)
			names.Unlock()
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := p.Start(ctx, gpudra.StartConfig{KubeClient: client, RegistrarDir: reg, PluginDir: data,
		Options: []kubeletplugin.Option{kubeletplugin.GRPCVerbosity(-1)}}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(p.Stop)
	regConn, err := grpc.NewClient("unix://"+filepath.Join(reg, gpudra.DefaultDriverName+"-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = regConn.Close() })
	info, err := registerapi.NewRegistrationClient(regConn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != gpudra.DefaultDriverName || !slices.Contains(info.SupportedVersions, drapbv1.DRAPluginService) {
		t.Fatalf("GetInfo = %+v", info)
	}
	if _, err := registerapi.NewRegistrationClient(regConn).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	conn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return drapbv1.NewDRAPluginClient(conn), client
}

func grpcClaims(cs ...*resourceapi.ResourceClaim) []*drapbv1.Claim {
	out := make([]*drapbv1.Claim, 0, len(cs))
	for _, c := range cs {
		out = append(out, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	return out
}

// TestPluginThroughKubeletSockets drives the plugin as kubelet does: registration socket,
// GetInfo, then NodePrepareResources and NodeUnprepareResources on the DRA socket, for an
// exclusive GPU, time-slicing, MPS and a dynamic MIG device.
func TestPluginThroughKubeletSockets(t *testing.T) {
	e := newPluginEnv(t, "dgx-a100-40gb", true)
	claims := []*resourceapi.ResourceClaim{
		e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), ""),
		e.claim(gpudra.GPUDeviceClassName, gpuIndex(1), timeSlicingConfig),
		e.claim(gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig),
		e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 3), ""),
	}
	p := e.newPlugin(pluginOpts{})
	dra, client := startWithSockets(t, p, claims...)
	ctx := context.Background()

	resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: grpcClaims(claims...)})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	for _, c := range claims {
		r := resp.Claims[string(c.UID)]
		if r == nil || r.Error != "" {
			t.Fatalf("claim %s: %+v", c.Name, r)
		}
		dev := c.Status.Allocation.Devices.Results[0].Device
		want := &drapbv1.Device{RequestNames: []string{"gpu"}, PoolName: testNode, DeviceName: dev,
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
	if got := e.instances(); !cmp.Equal(got, []string{fmt.Sprintf("3:1g.5gb@%d", mn.PlacementStart)}) {
		t.Errorf("MIG instances = %v", got)
	}
	st := e.host.State()
	if st.TimeSlices[e.inv.GPUs[1].UUID] != 3 || st.ComputeModes[e.inv.GPUs[2].UUID] != sharing.ComputeModeExclusiveProcess || len(st.Daemons) != 1 {
		t.Errorf("host state after prepare = %+v", st)
	}

	// The kubelet repeats prepare after its own restart: same answer, no new side effects.
	creates := e.machine.Calls("CreateGpuInstanceWithPlacement")
	resp2, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: grpcClaims(claims...)})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(resp.String(), resp2.String()); d != "" {
		t.Errorf("repeated prepare differs (-first +second):\n%s", d)
	}
	if got := e.machine.Calls("CreateGpuInstanceWithPlacement"); got != creates {
		t.Errorf("repeated prepare created MIG instances: %d → %d calls", creates, got)
	}

	uresp, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: grpcClaims(claims...)})
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
	if got := e.instances(); len(got) != 0 {
		t.Errorf("MIG instances left: %v", got)
	}
	if err := e.hostClean(); err != nil {
		t.Error(err)
	}
	// Unprepare of an unknown claim succeeds.
	if _, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: grpcClaims(claims[0])}); err != nil {
		t.Errorf("repeated unprepare: %v", err)
	}

	// The slices were published through the helper.
	waitFor(t, func() bool {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) > 0
	}, "ResourceSlices published")
}

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPluginPrepareErrorsNameClaimDeviceStep makes MIG creation fail and checks the error and
// that nothing is left behind.
func TestPluginPrepareErrorsNameClaimDeviceStep(t *testing.T) {
	e := newPluginEnv(t, "dgx-a100-40gb", true)
	c := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), "")
	reg := prometheus.NewPedanticRegistry()
	p := e.newPlugin(pluginOpts{metrics: reg})
	if _, err := p.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.machine.InjectFault("CreateComputeInstance", 1, 3 /* ERROR_NOT_SUPPORTED-like */); err != nil {
		t.Fatal(err)
	}
	_, err := prepareOne(t, p, c)
	dev := c.Status.Allocation.Devices.Results[0].Device
	want := fmt.Sprintf("prepare claim default/%s (%s): device %s: create MIG instance: ", c.Name, c.UID, dev)
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error = %v, want prefix %q", err, want)
	}
	if got := e.instances(); len(got) != 0 {
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
	other.UID = types.UID(testUID(999))
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
	e := newPluginEnv(t, "dgx-a100-40gb", false)
	p := e.newPlugin(pluginOpts{})
	if _, err := p.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	claims := make([]*resourceapi.ResourceClaim, n)
	for i := range claims {
		g := i % 8
		share := types.UID(fmt.Sprintf("share-%d", i))
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i), Namespace: "default", UID: types.UID(testUID(10000 + i))},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: gpudra.DefaultDriverName, Pool: testNode,
					Device: gpudra.GPUDeviceName(e.inv.GPUs[g].Minor), ShareID: &share}}}}},
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
	if err := e.hostClean(); err != nil {
		t.Error(err)
	}
	rep, err := e.newPlugin(pluginOpts{}).Reconcile(context.Background())
	if err != nil || rep.Prepared != 0 || len(rep.RolledBack) != 0 {
		t.Errorf("after the run: %v, %v", rep, err)
	}
}
