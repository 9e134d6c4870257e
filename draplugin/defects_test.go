package draplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/sharing"
)

// Tests for the node-runtime defects of issue 11, named after them. Each failed on the code
// before its fix.

// twoRequestsOnOneGPU is a claim whose two requests each ask for 10Gi of GPU 0's memory, which
// consumable capacity satisfies with the same device twice.
func twoRequestsOnOneGPU(name, config string) *resourceapi.ResourceClaim {
	c := draplugintest.Claim(name, gpudra.GPUDeviceClassName, gpuIndex(0), config)
	req := c.Spec.Devices.Requests[0]
	req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		gpudra.CapMemory: resource.MustParse("10Gi")}}
	second := *req.DeepCopy()
	second.Name = "gpu2"
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{req, second}
	if config != "" {
		c.Spec.Devices.Config[0].Requests = []string{"gpu", "gpu2"}
	}
	return c
}

func TestDefect10SameDeviceTwiceInOneClaim(t *testing.T) {
	e := newEnvWith(t, "dgx-h100", draplugintest.WithSliceOptions(gpudra.WithConsumableMemory(gpudra.ConsumableMemory{})))
	p := e.plugin()
	// A fraction of a GPU's memory runs under MPS with or without an MPS config.
	for i, config := range []string{"", mpsConfig} {
		c, err := e.Allocate(context.Background(), twoRequestsOnOneGPU(fmt.Sprintf("twice-%d", i), config))
		if err != nil {
			t.Fatal(err)
		}
		res := c.Status.Allocation.Devices.Results
		if len(res) != 2 || res[0].Device != res[1].Device {
			t.Fatalf("allocation %+v: want one device twice", res)
		}
		devs, err := prepareOne(t, p, c)
		if err != nil {
			t.Fatalf("prepare (config %q): %v", config, err)
		}
		if len(devs) != 2 || devs[0].CDIDeviceIDs[0] != devs[1].CDIDeviceIDs[0] || *devs[0].ShareID == *devs[1].ShareID {
			t.Errorf("devices %+v: want both requests on one CDI device, with their own share IDs", devs)
		}
		if err := unprepareOne(t, p, c); err != nil {
			t.Fatal(err)
		}
		e.Release(c)
	}
	if err := e.HostClean(); err != nil {
		t.Error(err)
	}
}

func TestDefect11RePrepareChecksTheAllocation(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin()
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(3), "")
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	moved := c.DeepCopy()
	moved.Status.Allocation.Devices.Results[0].Device = gpudra.GPUDeviceName(e.Inventory.GPUs[5].Minor)
	_, err := prepareOne(t, p, moved)
	var se *draplugin.StepError
	if !errors.As(err, &se) || se.Step != draplugin.StepValidate || !strings.Contains(err.Error(), "must be unprepared before it is prepared again") {
		t.Fatalf("re-prepare with another device: %v", err)
	}
	if got := e.specs(); len(got) != 1 {
		t.Errorf("specs = %v, want the original claim's only", got)
	}
}

func TestDefect12OtherNodesPool(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin()
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), "")
	c.Status.Allocation.Devices.Results[0].Pool = "node-2"
	_, err := prepareOne(t, p, c)
	var se *draplugin.StepError
	if !errors.As(err, &se) || se.Step != draplugin.StepResolve || !strings.Contains(err.Error(), `pool "node-2"`) {
		t.Fatalf("prepare of another node's device: %v", err)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("specs = %v, want none", got)
	}
}

// adminClaim is a claim with admin access to the device selected.
func (e *env) adminClaim(class, selector string) *resourceapi.ResourceClaim {
	e.t.Helper()
	e.n++
	c := draplugintest.Claim(fmt.Sprintf("admin-%d", e.n), class, selector, "")
	c.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	allocated, err := e.Allocate(context.Background(), c)
	if err != nil {
		e.t.Fatalf("allocate %s: %v", c.Name, err)
	}
	return allocated
}

func TestDefect5AdminAccessNeverOwns(t *testing.T) {
	// Admin access to a time-sliced GPU and a static MIG device that workload claims use.
	e := newEnv(t, "dgx-a100-40gb", false, gputest.WithMIG(2, "3g.20gb", "3g.20gb"))
	p := e.plugin()
	e.reconcile(p)
	work := e.claim(gpudra.GPUDeviceClassName, gpuIndex(1), timeSlicingConfig)
	workMIG := e.claim(gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 2", mpsConfig)
	for _, c := range []*resourceapi.ResourceClaim{work, workMIG} {
		if _, err := prepareOne(t, p, c); err != nil {
			t.Fatal(err)
		}
	}
	hostBefore := e.Host.State()
	adminGPU := e.adminClaim(gpudra.GPUDeviceClassName, gpuIndex(1))
	adminMIG := e.adminClaim(gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 2")
	adminMIG.Status.Allocation.Devices.Results[0].Device = workMIG.Status.Allocation.Devices.Results[0].Device
	for _, c := range []*resourceapi.ResourceClaim{adminGPU, adminMIG} {
		if _, err := prepareOne(t, p, c); err != nil {
			t.Errorf("admin access to a device in use: %v", err)
		}
	}
	if diff := cmp.Diff(hostBefore, e.Host.State()); diff != "" {
		t.Errorf("admin claims changed the host (-before +after):\n%s", diff)
	}
	for _, c := range []*resourceapi.ResourceClaim{adminGPU, adminMIG} {
		if err := unprepareOne(t, p, c); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(hostBefore, e.Host.State()); diff != "" {
		t.Errorf("unpreparing admin claims changed the host (-before +after):\n%s", diff)
	}
}

// TestDefect5AdminAccessNeverCreates: admin access to a dynamic MIG partition nobody prepared
// creates nothing and fails clearly; the workload claim that gets the partition later prepares.
func TestDefect5AdminAccessNeverCreates(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	p := e.plugin()
	e.reconcile(p)
	free := e.adminClaim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 5))
	_, err := prepareOne(t, p, free)
	if err == nil || !strings.Contains(err.Error(), "admin access") {
		t.Errorf("admin access to an uncreated partition: %v", err)
	}
	if got := e.MIGInstances(); len(got) != 0 {
		t.Errorf("admin access created an instance: %v", got)
	}
	if e.Machine.MIGEnabled(5) {
		t.Error("admin access enabled MIG mode")
	}
	e.Release(free)
	later := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 5), "")
	if _, err := prepareOne(t, p, later); err != nil {
		t.Errorf("workload claim after a refused admin claim: %v", err)
	}
	// Admin access to the partition now in use takes the workload's instance and, unprepared,
	// leaves it to the workload.
	free.Status.Allocation.Devices.Results[0].Device = later.Status.Allocation.Devices.Results[0].Device
	if _, err := prepareOne(t, p, free); err != nil {
		t.Errorf("admin access to a partition in use: %v", err)
	}
	if err := unprepareOne(t, p, free); err != nil {
		t.Fatal(err)
	}
	if got := e.MIGInstances(); len(got) != 1 {
		t.Errorf("after the admin claim's unprepare: instances %v, want the workload's", got)
	}
	if err := unprepareOne(t, p, later); err != nil {
		t.Fatal(err)
	}
	if got := e.MIGInstances(); len(got) != 0 {
		t.Errorf("after the workload's unprepare: instances %v", got)
	}
}

// TestDefect6WholeGPUAfterDynamicMIG: after the last partition of a GPU is unprepared, a claim
// that gets the whole GPU must not be handed a GPU still in MIG mode (CUDA sees no device).
func TestDefect6WholeGPUAfterDynamicMIG(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	p := e.plugin()
	e.reconcile(p)
	part := e.claim(gpudra.MIGDeviceClassName, migProfileOn("3g.20gb", 3), "")
	if _, err := prepareOne(t, p, part); err != nil {
		t.Fatal(err)
	}
	if !e.Machine.MIGEnabled(3) {
		t.Fatal("MIG mode not on after preparing a partition")
	}
	if err := unprepareOne(t, p, part); err != nil {
		t.Fatal(err)
	}
	e.Release(part)
	whole := e.claim(gpudra.GPUDeviceClassName, gpuIndex(3), "")
	if _, err := prepareOne(t, p, whole); err != nil {
		t.Fatal(err)
	}
	if e.Machine.MIGEnabled(3) {
		t.Error("the whole GPU was prepared while it is in MIG mode")
	}
	// A partition prepared later turns MIG mode on again.
	if err := unprepareOne(t, p, whole); err != nil {
		t.Fatal(err)
	}
	e.Release(whole)
	again := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 3), "")
	if _, err := prepareOne(t, p, again); err != nil || !e.Machine.MIGEnabled(3) {
		t.Errorf("partition after the whole GPU: %v, MIG mode %v", err, e.Machine.MIGEnabled(3))
	}
}

// TestDefect7StaticMIGLayoutChanged: the MIG layout of a static-MIG node changes — in a reboot,
// or by an operator while the plugin is down. A claim prepared on a device the new layout lacks
// must never get a spec for whatever instance now has its old GPU-instance id: it is forgotten,
// and kubelet's next prepare of it fails, leaving nothing. A claim whose device the new layout
// still has (same name: profile and placement) ends with a spec granting the instance that
// exists now: kept with its ids updated (same boot), or forgotten and prepared again (reboot).
func TestDefect7StaticMIGLayoutChanged(t *testing.T) {
	for _, tc := range []struct {
		name          string
		change        func(t *testing.T, e *env)
		wantForgotten func(gone, kept string) []string
	}{
		{"reboot", func(t *testing.T, e *env) {
			if err := e.Reboot(gputest.WithMIG(0, "7g.40gb"), gputest.WithMIG(1, "3g.20gb", "1g.5gb", "1g.5gb")); err != nil {
				t.Fatal(err)
			}
		}, func(gone, kept string) []string { return []string{gone, kept} }},
		{"operator, same boot", func(t *testing.T, e *env) {
			removeInstance(t, e, 0, "3g.20gb@0")
			removeInstance(t, e, 0, "3g.20gb@4")
			applyInstances(t, e, 0, "7g.40gb@0")
			removeInstance(t, e, 1, "3g.20gb@4")
			applyInstances(t, e, 1, "1g.5gb@4", "1g.5gb@5")
		}, func(gone, _ string) []string { return []string{gone} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", false, gputest.WithMIG(0, "3g.20gb", "3g.20gb"), gputest.WithMIG(1, "3g.20gb", "3g.20gb"))
			p := e.plugin()
			e.reconcile(p)
			gone := e.claim(gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 0", "")
			kept := e.claim(gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 1", "")
			prepareAll(t, p, gone, kept)
			tc.change(t, e)
			p2 := e.plugin()
			rep := e.reconcile(p2)
			sorted := cmpopts.SortSlices(func(a, b string) bool { return a < b })
			if diff := cmp.Diff(tc.wantForgotten(claimRefOf(gone), claimRefOf(kept)), rep.Forgotten, sorted); diff != "" {
				t.Errorf("forgotten (-want +got):\n%s", diff)
			}
			// Kubelet prepares both again (a repeated prepare for a kept claim).
			if _, err := prepareOne(t, p2, kept); err != nil {
				t.Fatalf("prepare of the claim whose device still exists: %v", err)
			}
			if _, err := prepareOne(t, p2, gone); err == nil {
				t.Fatal("prepare of the claim whose device is gone succeeded")
			}
			if got := e.specs(); !cmp.Equal(got, []string{string(kept.UID)}) {
				t.Fatalf("specs = %v, want only the surviving claim's", got)
			}
			if rep := e.reconcile(e.plugin()); rep.Prepared != 1 {
				t.Errorf("a fresh plugin finds %d prepared claims, want 1 (%v)", rep.Prepared, rep)
			}
			checkGrantsCurrentInstance(t, e, kept)
		})
	}
}

// checkGrantsCurrentInstance fails unless the spec of the claim (one MIG device) grants the
// GPU instance that has the allocated device's name on the machine now.
func checkGrantsCurrentInstance(t *testing.T, e *env, c *resourceapi.ResourceClaim) {
	t.Helper()
	spec, err := os.ReadFile(filepath.Join(e.CDIDir, "k8s.gpu.nvidia.com-claim_"+string(c.UID)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	dev := c.Status.Allocation.Devices.Results[0].Device
	inv, err := nvmlgpu.Enumerate(context.Background(), e.Machine)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range inv.GPUs {
		for i := range g.MIGDevices {
			if m := &g.MIGDevices[i]; gpudra.MIGDeviceNameOf(m) == dev {
				giPath := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", cditest.GIMinor(g.Minor, m.GIID))
				if !strings.Contains(string(spec), giPath) {
					t.Errorf("spec of %s does not grant the GPU instance that exists now (%s):\n%s", dev, giPath, spec)
				}
				return
			}
		}
	}
	t.Fatalf("device %s is not on the machine", dev)
}

func claimRefOf(c *resourceapi.ResourceClaim) string {
	return fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, c.UID)
}

// TestDefect1CorruptCheckpointDestroysNothing: a corrupt checkpoint (or a wiped state
// directory) must not make the plugin destroy the MIG instances and CDI specs of claims kubelet
// considers prepared. They are adopted from what is on the node: kubelet's repeated prepare gets
// the same answer, and its unprepare releases the instance, the spec and the MPS daemon.
func TestDefect1CorruptCheckpointDestroysNothing(t *testing.T) {
	for _, damage := range []string{"corrupt", "wiped"} {
		t.Run(damage, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", true)
			p := e.plugin()
			e.reconcile(p)
			claims := []*resourceapi.ResourceClaim{
				e.claim(gpudra.MIGDeviceClassName, migProfileOn("2g.10gb", 1), ""),
				e.claim(gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig),
				e.claim(gpudra.GPUDeviceClassName, gpuIndex(3), ""),
			}
			want := prepareAll(t, p, claims...)
			instances, host := e.MIGInstances(), e.Host.State()
			switch damage {
			case "corrupt":
				if err := os.WriteFile(filepath.Join(e.StateDir, "checkpoint.json"), []byte(`{"version":2,"checksum":"sha256:00","data":{}}`), 0o600); err != nil {
					t.Fatal(err)
				}
			case "wiped":
				if err := os.Remove(filepath.Join(e.StateDir, "checkpoint.json")); err != nil {
					t.Fatal(err)
				}
			}
			p2 := e.plugin()
			rep := e.reconcile(p2)
			if len(rep.Adopted) != 3 || len(rep.MIGDestroyed)+len(rep.SpecsPruned) != 0 {
				t.Errorf("reconciliation: %v (adopted %v, destroyed %v, pruned %v)", rep, rep.Adopted, rep.MIGDestroyed, rep.SpecsPruned)
			}
			if got := e.MIGInstances(); !cmp.Equal(got, instances) {
				t.Errorf("MIG instances %v, want %v untouched", got, instances)
			}
			if diff := cmp.Diff(host, e.Host.State()); diff != "" {
				t.Errorf("host changed (-before +after):\n%s", diff)
			}
			checkPrepared(t, e, p2, want, claims)
			unprepareAll(t, e, p2, claims...)
		})
	}
}

// TestLostCheckpointTwoClaimsOnOnePartition: an admin-access claim is prepared on the dynamic
// partition a workload claim created, then the checkpoint is lost. Reconciliation adopts both
// from their CDI specs, which do not say which claim created the instance, so both record it as
// theirs. Unpreparing either must not destroy it while the other records it; the last one does.
// The admin-access allocation is made by hand from the workload's: the v1.37 allocator refuses
// admin access to a partition (kubernetes#140729), the plugin supports it. Found by review.
func TestLostCheckpointTwoClaimsOnOnePartition(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	p := e.plugin()
	e.reconcile(p)
	work := e.claim(gpudra.MIGDeviceClassName, migProfileOn("3g.20gb", 5), "")
	admin := work.DeepCopy()
	admin.Name, admin.UID = "admin", draplugintest.UID("admin")
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	prepareAll(t, p, work, admin)
	instances := e.MIGInstances()
	if err := os.Remove(filepath.Join(e.StateDir, checkpoint.FileName)); err != nil {
		t.Fatal(err)
	}
	p2 := e.plugin()
	if rep := e.reconcile(p2); len(rep.Adopted) != 2 {
		t.Fatalf("reconciliation adopted %v, want both claims", rep.Adopted)
	}
	if err := unprepareOne(t, p2, admin); err != nil {
		t.Fatal(err)
	}
	if got := e.MIGInstances(); !cmp.Equal(got, instances) {
		t.Errorf("after the admin-access claim's unprepare: MIG instances %v, want the workload's %v", got, instances)
	}
	if err := unprepareOne(t, p2, work); err != nil {
		t.Fatal(err)
	}
	if got := e.MIGInstances(); len(got) != 0 {
		t.Errorf("after both unprepares: MIG instances %v, want none", got)
	}
}

// TestDefect14SmallerOnes covers the smaller defects: fatal helper errors are not only logged,
// a failed Start leaves no stopped helper behind, devices without a running health monitor are
// Unknown (not Healthy), a lost GPU does not make the monitor spin, and a MIG-scoped XID taints
// the MIG device, not its GPU.
func TestDefect14SmallerOnes(t *testing.T) {
	t.Run("fatal error", func(t *testing.T) {
		e := newEnv(t, "l4x8", false)
		p := e.plugin()
		p.HandleError(context.Background(), fmt.Errorf("slice update: %w", kubeletplugin.ErrRecoverable), "publish")
		if p.Err() != nil {
			t.Fatalf("a recoverable error is fatal: %v", p.Err())
		}
		p.HandleError(context.Background(), errors.New("gRPC server died"), "serve")
		select {
		case <-p.Done():
		default:
			t.Fatal("a fatal error did not close Done")
		}
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), "gRPC server died") {
			t.Errorf("Err() = %v", err)
		}
	})
	t.Run("failed start", func(t *testing.T) {
		e := newEnv(t, "l4x8", false)
		p := e.plugin()
		_, err := e.Serve(context.Background(), p, draplugin.StartConfig{Options: []kubeletplugin.Option{kubeletplugin.NodeName("")}})
		if err == nil || p.Helper() != nil {
			t.Errorf("Start with an unpublishable configuration: %v, helper %v", err, p.Helper())
		}
	})
	t.Run("no monitor", func(t *testing.T) {
		e := newEnv(t, "l4x8", false)
		p := e.plugin()
		srv, err := e.Serve(context.Background(), p, draplugin.StartConfig{NoHealthMonitor: true})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		reports := make(chan kubeletplugin.DeviceHealthReport, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = p.WatchHealthStatus(ctx, reports) }()
		if h := (<-reports).Devices[0]; h.Health != kubeletplugin.HealthStatusUnknown {
			t.Errorf("device health without a monitor = %+v, want Unknown", h)
		}
	})
	t.Run("lost GPU", func(t *testing.T) {
		e := newEnv(t, "l4x8", false)
		p := e.plugin(withHealth(draplugin.HealthConfig{EventWait: 10 * time.Millisecond}))
		serve(t, e, p)
		if err := e.Machine.InjectGPULost(3); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return p.Unhealthy()[e.Inventory.GPUs[3].UUID] == "gpu-lost" }, "GPU 3 marked lost")
		before := e.Machine.Calls("EventSet.Wait")
		time.Sleep(300 * time.Millisecond)
		if n := e.Machine.Calls("EventSet.Wait") - before; n > 10 {
			t.Errorf("the monitor waited for events %d times in 300ms while a GPU is lost: it spins", n)
		}
	})
	t.Run("MIG-scoped XID", func(t *testing.T) {
		e := newEnv(t, "dgx-a100-40gb", false, gputest.WithMIG(4, "3g.20gb", "3g.20gb"))
		p := e.plugin(withHealth(draplugin.HealthConfig{EventWait: 10 * time.Millisecond}))
		serve(t, e, p)
		m := e.Inventory.GPUs[4].MIGDevices[0]
		other := gpudra.MIGDeviceNameOf(&e.Inventory.GPUs[4].MIGDevices[1])
		if err := e.Machine.InjectMIGXID(4, uint32(m.GIID), uint32(m.CIID), 94); err != nil {
			t.Fatal(err)
		}
		dev := gpudra.MIGDeviceNameOf(&m)
		waitFor(t, func() bool { return len(taintsOf(t, p, dev)) == 1 }, "the MIG device tainted")
		if got := taintsOf(t, p, other); len(got) != 0 {
			t.Errorf("the other MIG device of the GPU is tainted too: %v", got)
		}
		if got := p.Unhealthy(); got[e.Inventory.GPUs[4].UUID] != "" {
			t.Errorf("the whole GPU is marked unhealthy: %v", got)
		}
	})
}

// TestDefect3FailedSharingRollbackIsNotForgotten: an MPS start fails and so does the undo of
// the compute mode it had set. The host change must stay recorded (the claim kept as started)
// until a later attempt undoes it; and a prepare whose context is cancelled half-way (kubelet's
// deadline) still cleans up.
func TestDefect3FailedSharingRollbackIsNotForgotten(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin()
	e.reconcile(p)
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig)
	uuid := e.Inventory.GPUs[2].UUID
	e.Host.FailOn("Start "+string(c.UID), errors.New("nvidia-cuda-mps-control: no such file"))
	e.Host.FailOn("SetComputeMode "+uuid+" DEFAULT", errors.New("nvidia-smi: GPU is busy"))
	if _, err := prepareOne(t, p, c); err == nil {
		t.Fatal("prepare succeeded")
	}
	if got := e.Host.State().ComputeModes[uuid]; got != sharing.ComputeModeExclusiveProcess {
		t.Fatalf("compute mode %v: the test needs the undo to have failed", got)
	}
	// A restarted plugin still knows about the compute mode and resets it.
	e.Host.FailOn("SetComputeMode "+uuid+" DEFAULT", nil)
	rep := e.reconcile(e.plugin())
	if len(rep.RolledBack) != 1 {
		t.Errorf("reconciliation: %v, want the claim rolled back", rep)
	}
	if err := e.HostClean(); err != nil {
		t.Errorf("host after the rollback: %v", err)
	}

	// Kubelet's deadline expires while the daemon starts: the cleanup still runs.
	e.Host.FailOn("Start "+string(c.UID), nil)
	ctx, cancel := context.WithCancel(context.Background())
	e.Host.SetHook(func(call string) error {
		if strings.HasPrefix(call, "Start ") {
			cancel()
			return context.Canceled
		}
		return nil
	})
	p2 := e.plugin()
	if _, err := draplugintest.Prepare(ctx, p2, c); err == nil {
		t.Fatal("prepare with a cancelled context succeeded")
	}
	e.Host.SetHook(nil)
	if err := e.HostClean(); err != nil {
		t.Errorf("host after a cancelled prepare: %v", err)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("specs after a cancelled prepare: %v", got)
	}
}

// TestDefect13MPSDaemonsAreSupervised: the MPS daemon of a prepared claim dies (with the
// plugin's container); the restarted plugin's reconciliation starts it again, and its shm tmpfs
// is bounded and released on unprepare.
func TestDefect13MPSDaemonsAreSupervised(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin()
	e.reconcile(p)
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(4), mpsConfig)
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	st := e.Host.State()
	d, ok := st.Daemons[string(c.UID)]
	if !ok || st.Mounts[d.ShmDir] != sharing.DefaultMPSShmSize {
		t.Fatalf("host after prepare: daemons %v, mounts %v: want the claim's daemon with a %d-byte shm tmpfs", st.Daemons, st.Mounts, sharing.DefaultMPSShmSize)
	}
	e.Host.KillDaemon(string(c.UID))
	rep := e.reconcile(e.plugin())
	if !slices.Equal(rep.MPSRestarted, []string{string(c.UID)}) {
		t.Errorf("restarted %v, want the claim's daemon", rep.MPSRestarted)
	}
	if _, ok := e.Host.State().Daemons[string(c.UID)]; !ok {
		t.Error("the daemon does not run after reconciliation")
	}
	// While serving, a daemon that dies is restarted within the supervision interval.
	serving := e.plugin(func(cfg *draplugin.Config) { cfg.SuperviseInterval = 20 * time.Millisecond })
	serve(t, e, serving, c)
	e.Host.KillDaemon(string(c.UID))
	waitFor(t, func() bool { _, ok := e.Host.State().Daemons[string(c.UID)]; return ok }, "the daemon restarted while serving")
	if err := unprepareOne(t, serving, c); err != nil {
		t.Fatal(err)
	}
	if err := e.HostClean(); err != nil {
		t.Error(err)
	}
}
