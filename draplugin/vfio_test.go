package draplugin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/vfio"
)

func newVFIOEnv(t *testing.T, nopts ...draplugintest.NodeOption) *env {
	return newEnvWith(t, "dgx-a100-40gb", append([]draplugintest.NodeOption{draplugintest.WithPassthrough()}, nopts...)...)
}

// vfioClaim allocates a claim for the vfio device of the GPU with index i.
func (e *env) vfioClaim(i int) *resourceapi.ResourceClaim {
	return e.claim(gpudra.VFIODeviceClassName, gpuIndex(i), "")
}

func (e *env) gpu(i int) gpu.GPU { return e.Inventory.GPUs[i] }

// specOf reads the claim's CDI spec, nil when there is none.
func (e *env) specOf(c *resourceapi.ResourceClaim) *cdispec.Spec {
	e.t.Helper()
	matches, _ := filepath.Glob(filepath.Join(e.CDIDir, "*"+string(c.UID)+"*"))
	if len(matches) == 0 {
		return nil
	}
	data, err := os.ReadFile(matches[0])
	if err != nil {
		e.t.Fatal(err)
	}
	var s cdispec.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		e.t.Fatalf("%s: %v", matches[0], err)
	}
	return &s
}

// bound reports whether the GPU with index i and its audio function are on vfio-pci.
func (e *env) bound(i int) bool {
	addr := e.gpu(i).PCIBusID
	return e.PCI.Driver(addr) == vfio.DriverVFIO && e.PCI.Driver(strings.TrimSuffix(addr, ".0")+".1") == vfio.DriverVFIO
}

func TestVFIOPrepareUnprepare(t *testing.T) {
	e := newVFIOEnv(t)
	p := e.plugin()
	e.reconcile(p)
	c := e.vfioClaim(2)
	g := e.gpu(2)
	devs, err := prepareOne(t, p, c)
	if err != nil {
		t.Fatal(err)
	}
	name := gpudra.VFIODeviceName(g.Minor)
	if len(devs) != 1 || devs[0].DeviceName != name {
		t.Fatalf("prepared %+v, want device %s", devs, name)
	}
	if !e.bound(2) || e.gpu(0).PCIBusID == "" || e.PCI.Driver(e.gpu(0).PCIBusID) != "nvidia" {
		t.Fatalf("GPU 2 bound %v, GPU 0 on %q; want GPU 2 bound, GPU 0 on nvidia", e.bound(2), e.PCI.Driver(e.gpu(0).PCIBusID))
	}
	spec := e.specOf(c)
	if spec == nil {
		t.Fatal("no CDI spec")
	}
	group := draplugintest.PassthroughGroupBase + g.Minor
	wantCommon := cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/vfio/vfio", Type: "c", Major: 10, Minor: 196}},
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void", "PCI_RESOURCE_NVIDIA_COM_A100_SXM4_40GB=" + g.PCIBusID},
	}
	if diff := cmp.Diff(wantCommon, spec.ContainerEdits); diff != "" {
		t.Errorf("spec container edits (-want +got):\n%s", diff)
	}
	wantDev := []cdispec.Device{{Name: string(c.UID) + "-" + name, ContainerEdits: cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{{Path: fmt.Sprintf("/dev/vfio/%d", group), Type: "c", Major: gputest.VFIOMajor, Minor: int64(group)}}}}}
	if diff := cmp.Diff(wantDev, spec.Devices); diff != "" {
		t.Errorf("spec devices (-want +got):\n%s", diff)
	}
	if err := unprepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	if err := e.HostClean(); err != nil {
		t.Error(err)
	}
	if e.specOf(c) != nil {
		t.Error("CDI spec left after unprepare")
	}
}

func TestVFIORefuses(t *testing.T) {
	e := newVFIOEnv(t)
	p := e.plugin()
	e.reconcile(p)
	container := e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), "")
	if _, err := prepareOne(t, p, container); err != nil {
		t.Fatal(err)
	}
	// A claim force-deleted and reallocated before its unprepare: the scheduler's counters do
	// not know the GPU is still prepared.
	vm := e.vfioClaim(1)
	vm.Status.Allocation.Devices.Results[0].Device = gpudra.VFIODeviceName(e.gpu(0).Minor)
	_, err := prepareOne(t, p, vm)
	if err == nil || !strings.Contains(err.Error(), "is prepared for claim "+string(container.UID)) {
		t.Fatalf("prepare of a vfio claim on a prepared GPU: %v, want an error naming the claim", err)
	}
	ts := e.claim(gpudra.VFIODeviceClassName, gpuIndex(3), timeSlicingConfig)
	if _, err := prepareOne(t, p, ts); err == nil || !strings.Contains(err.Error(), "sharing (time-slicing, MPS) does not apply") {
		t.Fatalf("prepare of a time-sliced vfio claim: %v, want a refusal", err)
	}
	if e.bound(0) || e.bound(1) || e.bound(3) {
		t.Error("a refused claim bound a GPU")
	}
}

// TestVFIONewRequiresABinder: a plugin that publishes vfio devices without a binder is refused
// at New, not at the first prepare.
func TestVFIONewRequiresABinder(t *testing.T) {
	e := newVFIOEnv(t)
	_, err := e.NewPlugin(e.ctx(), func(c *draplugin.Config) { c.Passthrough = nil })
	if err == nil || !strings.Contains(err.Error(), "Passthrough is nil") {
		t.Fatalf("New without a binder: %v, want an error", err)
	}
}

// settled checks what a crash and a restart's reconciliation must leave: the claim prepared
// with its GPU bound, or nothing at all — GPU and audio function on their drivers, no spec.
func settled(t *testing.T, e *env, c *resourceapi.ResourceClaim, what string) {
	t.Helper()
	if spec := e.specOf(c); spec != nil {
		if !e.bound(2) {
			t.Errorf("%s: the claim's spec exists but GPU 2 is not bound to vfio-pci", what)
		}
		return
	}
	if err := e.HostClean(); err != nil {
		t.Errorf("%s: no spec, but the host is not clean: %v", what, err)
	}
}

// TestVFIOCrashAtEveryStep stops the plugin at every crash point of a passthrough prepare and
// unprepare; a new plugin reconciles, then kubelet retries. The claim must end bound and
// recorded or unbound and clean, and the retries must succeed.
func TestVFIOCrashAtEveryStep(t *testing.T) {
	for _, op := range []string{"prepare", "unprepare"} {
		for n := 1; ; n++ {
			e := newVFIOEnv(t)
			c := e.vfioClaim(2)
			crash := draplugintest.CrashAt(c.UID, n)
			crash.Arm(op == "prepare")
			p := e.plugin(withHooks(crash.Hooks()))
			e.reconcile(p)
			_, err := prepareOne(t, p, c)
			if op == "unprepare" {
				if err != nil {
					t.Fatal(err)
				}
				crash.Arm(true)
				err = unprepareOne(t, p, c)
			}
			if !errors.Is(err, testhooks.ErrCrash) {
				if n == 1 {
					t.Fatalf("%s: no crash point", op)
				}
				break // every point done
			}
			what := fmt.Sprintf("%s crash at %s", op, crash.Seen()[len(crash.Seen())-1])
			p.Stop()
			p2 := e.plugin()
			e.reconcile(p2)
			settled(t, e, c, what)
			if op == "prepare" {
				if _, err := prepareOne(t, p2, c); err != nil || !e.bound(2) {
					t.Fatalf("%s: retried prepare: %v, bound %v", what, err, e.bound(2))
				}
			}
			if err := unprepareOne(t, p2, c); err != nil {
				t.Fatalf("%s: retried unprepare: %v", what, err)
			}
			if err := e.HostClean(); err != nil || e.specOf(c) != nil {
				t.Errorf("%s: after unprepare: host %v, spec left %v", what, err, e.specOf(c) != nil)
			}
		}
	}
}

// deadAt is a binder step hook that kills the "process" at its n-th sysfs write: that write and
// every later one fail, as nothing runs after a kill.
type deadAt struct {
	mu   sync.Mutex
	n, k int
}

func (d *deadAt) hook(vfio.Step, string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.k++; d.k >= d.n {
		return testhooks.ErrCrash
	}
	return nil
}

// TestVFIOKillAtEverySysfsWrite kills the plugin at each sysfs write of the bind (two functions,
// three writes each) and of the unbind; a new plugin reconciles and kubelet retries.
func TestVFIOKillAtEverySysfsWrite(t *testing.T) {
	for _, op := range []string{"prepare", "unprepare"} {
		for n := 1; n <= 6; n++ {
			e := newVFIOEnv(t)
			dead := &deadAt{n: n}
			if op == "unprepare" {
				dead.n = 1 << 30
			}
			p := e.plugin(func(c *draplugin.Config) {
				b, err := vfio.NewSysfsBinder(vfio.WithFS(e.PCI), vfio.WithRoots(e.PCI.SysfsRoot(), e.PCI.DevRoot(), e.PCI.ProcRoot()), vfio.WithStepHook(dead.hook))
				if err != nil {
					t.Fatal(err)
				}
				c.Passthrough = b
			})
			e.reconcile(p)
			c := e.vfioClaim(2)
			_, err := prepareOne(t, p, c)
			if op == "unprepare" {
				if err != nil {
					t.Fatal(err)
				}
				dead.mu.Lock()
				dead.n, dead.k = n, 0
				dead.mu.Unlock()
				err = unprepareOne(t, p, c)
			}
			if !errors.Is(err, testhooks.ErrCrash) {
				t.Fatalf("%s killed at write %d: %v, want the kill", op, n, err)
			}
			what := fmt.Sprintf("%s killed at sysfs write %d", op, n)
			p.Stop()
			p2 := e.plugin()
			e.reconcile(p2)
			if op == "unprepare" {
				// An interrupted unprepare is finished by reconciliation.
				if err := e.HostClean(); err != nil || e.specOf(c) != nil {
					t.Errorf("%s: after reconciliation: host %v, spec left %v", what, err, e.specOf(c) != nil)
				}
				continue
			}
			settled(t, e, c, what)
			if _, err := prepareOne(t, p2, c); err != nil || !e.bound(2) {
				t.Fatalf("%s: retried prepare: %v, bound %v", what, err, e.bound(2))
			}
			if err := unprepareOne(t, p2, c); err != nil || e.HostClean() != nil {
				t.Fatalf("%s: unprepare: %v, host %v", what, err, e.HostClean())
			}
		}
	}
}

// TestVFIOBoundGPUGoneFromNVML: a GPU bound to vfio-pci is gone from NVML when the plugin
// restarts. The plugin keeps its claim, keeps publishing it from the checkpoint, and gives it
// back on unprepare.
func TestVFIOBoundGPUGoneFromNVML(t *testing.T) {
	e := newVFIOEnv(t)
	p := e.plugin()
	e.reconcile(p)
	c := e.vfioClaim(2)
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	inv := *e.Inventory
	inv.GPUs = append(append([]gpu.GPU{}, inv.GPUs[:2]...), inv.GPUs[3:]...)
	p2 := e.plugin(func(cfg *draplugin.Config) { cfg.Inventory = &inv })
	rep := e.reconcile(p2)
	if len(rep.Forgotten)+len(rep.RolledBack)+len(rep.Unreadable) != 0 || e.specOf(c) == nil || !e.bound(2) {
		t.Fatalf("reconciliation with the bound GPU gone from NVML: %+v, spec %v, bound %v", rep, e.specOf(c) != nil, e.bound(2))
	}
	pool, err := p2.Resources(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	published := map[string]bool{}
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			published[d.Name] = true
		}
	}
	if name := gpudra.VFIODeviceName(e.gpu(2).Minor); !published[name] {
		t.Errorf("%s not published after the restart", name)
	}
	if err := unprepareOne(t, p2, c); err != nil {
		t.Fatal(err)
	}
	if err := e.HostClean(); err != nil {
		t.Error(err)
	}
}

// TestVFIOHealthIgnoresBoundGPU: the NVIDIA driver lets go of a GPU bound to vfio-pci and NVML
// reports it lost; that is no fault, and it taints nothing, while another GPU's loss does.
func TestVFIOHealthIgnoresBoundGPU(t *testing.T) {
	e := newVFIOEnv(t)
	p := e.plugin(withHealth(draplugin.HealthConfig{ReportInterval: time.Hour, EventWait: 20 * time.Millisecond, RecoveryWindow: -1}))
	serve(t, e, p)
	c := e.vfioClaim(2)
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{2, 3} {
		if err := e.Machine.InjectGPULost(i); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return p.Unhealthy()[e.gpu(3).UUID] != "" }, "GPU 3 tainted")
	if got := p.Unhealthy()[e.gpu(2).UUID]; got != "" {
		t.Errorf("GPU 2, bound to vfio-pci, tainted %q", got)
	}
}

// TestVFIOBesideDynamicMIG: on a node with dynamic MIG and passthrough, a MIG partition on one
// GPU and a virtual machine's GPU on another are prepared side by side; the vfio device of the
// partitioned GPU is refused while the partition is prepared; the passthrough prepare leaves MIG
// mode alone (the guest's driver owns the GPU).
func TestVFIOBesideDynamicMIG(t *testing.T) {
	// GPU 1 is in MIG mode without instances: a whole-GPU prepare would turn MIG mode off.
	e := newVFIOEnv(t, draplugintest.WithDynamicMIG(), draplugintest.WithMachineOptions(gputest.WithMIG(1)))
	p := e.plugin()
	e.reconcile(p)
	part := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), "")
	if _, err := prepareOne(t, p, part); err != nil {
		t.Fatal(err)
	}
	vm := e.vfioClaim(1)
	before := e.Machine.Calls("SetMigMode")
	if _, err := prepareOne(t, p, vm); err != nil || !e.bound(1) {
		t.Fatalf("prepare a vfio claim beside a MIG partition: %v, bound %v", err, e.bound(1))
	}
	if calls := e.Machine.Calls("SetMigMode") - before; calls != 0 {
		t.Errorf("SetMigMode called %d times for a passthrough prepare", calls)
	}
	again := e.vfioClaim(2)
	again.Status.Allocation.Devices.Results[0].Device = gpudra.VFIODeviceName(e.gpu(0).Minor)
	if _, err := prepareOne(t, p, again); err == nil || !strings.Contains(err.Error(), "is prepared for claim") {
		t.Errorf("vfio claim on the partitioned GPU: %v, want a refusal", err)
	}
	for _, c := range []*resourceapi.ResourceClaim{vm, part} {
		if err := unprepareOne(t, p, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.HostClean(); err != nil {
		t.Error(err)
	}
}
