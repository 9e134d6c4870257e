package gputest_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// TestStateDirSurvivesTheProcess: a machine opened again on its state files has the MIG mode,
// the GPU and compute instances (ids, placements, MIG UUIDs) and compute modes the first one
// left, not what its options would build.
func TestStateDirSurvivesTheProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "machine")
	m1, err := gputest.New("dgx-a100-40gb", gputest.WithStateDir(path), gputest.WithMIG(1, "3g.20gb"))
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := m1.DeviceGetHandleByIndex(3)
	mgr, err := nvmlmig.NewInstanceManager(dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	pl := mig.Placement{Start: 6, Size: 1}
	if _, err := mgr.Apply([]mig.Instance{{Profile: "1g.5gb", Placement: &pl}}); err != nil {
		t.Fatal(err)
	}
	d5, _ := m1.DeviceGetHandleByIndex(5)
	if ret := d5.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	// With MIG enabled, compute modes are set on MIG device handles (nvml.h).
	d1, _ := m1.DeviceGetHandleByIndex(1)
	mig1, _ := d1.GetMigDeviceHandleByIndex(0)
	if ret := mig1.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
		t.Fatalf("SetComputeMode on GPU 1's MIG device: %v", ret)
	}
	before, err := nvmlgpu.Enumerate(context.Background(), m1)
	if err != nil {
		t.Fatal(err)
	}

	m2, err := gputest.New("dgx-a100-40gb", gputest.WithStateDir(path))
	if err != nil {
		t.Fatal(err)
	}
	after, err := nvmlgpu.Enumerate(context.Background(), m2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("machine reopened from its state file differs (-before +after):\n%s", diff)
	}
	d5, _ = m2.DeviceGetHandleByIndex(5)
	if mode, _ := d5.GetComputeMode(); mode != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute mode of GPU 5 = %v, want EXCLUSIVE_PROCESS", mode)
	}
	d1, _ = m2.DeviceGetHandleByIndex(1)
	mig1, _ = d1.GetMigDeviceHandleByIndex(0)
	if mode, ret := mig1.GetComputeMode(); ret != nvml.SUCCESS || mode != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute mode of GPU 1's MIG device = %v (%v), want EXCLUSIVE_PROCESS", mode, ret)
	}
	// Destroying on the new machine is persisted too.
	dev, _ = m2.DeviceGetHandleByIndex(3)
	mgr, _ = nvmlmig.NewInstanceManager(dev, nil)
	if err := mgr.Remove([]mig.Instance{{Profile: "1g.5gb", Placement: &pl}}); err != nil {
		t.Fatal(err)
	}
	m3, err := gputest.New("dgx-a100-40gb", gputest.WithStateDir(path))
	if err != nil {
		t.Fatal(err)
	}
	if got := m3.GPUInstances(3); len(got) != 0 {
		t.Errorf("GPU 3 instances after the removal: %v", got)
	}
	if got := m3.GPUInstances(1); len(got) != 1 {
		t.Errorf("GPU 1 instances: %v, want the 3g.20gb", got)
	}
}

func TestCallHook(t *testing.T) {
	var calls []string
	m, err := gputest.New("l4x8", gputest.WithCallHook(func(c string) { calls = append(calls, c) }))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = m.DeviceGetCount()
	d, _ := m.DeviceGetHandleByIndex(0)
	_, _ = d.GetUUID()
	if diff := cmp.Diff([]string{"Interface.DeviceGetCount", "Interface.DeviceGetHandleByIndex", "Device.GetUUID"}, calls); diff != "" {
		t.Errorf("hooked calls (-want +got):\n%s", diff)
	}
}
