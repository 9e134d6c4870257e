package gputest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// nvidiaServers are the NVML mock servers NVIDIA ships in go-nvml (v0.13.3-1): its DGX
// machines and single GPUs of mock/gpus. They are a second source of fakes, written by someone
// else from their own idea of the hardware, against which gputest's agreement with the mig
// catalog proves nothing.
func nvidiaServers() map[string]func() *server.Server {
	single := func(c gpus.Config) func() *server.Server {
		return func() *server.Server {
			s, err := server.New(server.WithGPUs(c), server.WithDriverVersion("550.54.15"), server.WithCUDADriverVersion(12040))
			if err != nil {
				panic(err)
			}
			return s
		}
	}
	return map[string]func() *server.Server{
		"dgxa100": dgxa100.New, "dgxh100": dgxh100.New, "dgxh200": dgxh200.New, "dgxb200": dgxb200.New,
		"a30": single(gpus.A30_PCIE_24GB), "a100-pcie-80gb": single(gpus.A100_PCIE_80GB),
		"h100": single(gpus.H100_SXM5_80GB), "b200": single(gpus.B200_SXM5_180GB),
	}
}

// TestNotSupported: the wrapper answers ERROR_NOT_SUPPORTED where NVIDIA's mock would panic,
// also on handles the mock hands out later, and leaves what the mock implements alone.
func TestNotSupported(t *testing.T) {
	s := dgxa100.New()
	lib := gputest.NotSupported(s)
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if name, ret := d.GetName(); ret != nvml.SUCCESS || name != gpus.A100_SXM4_40GB.Name {
		t.Errorf("GetName = %q, %v; want the mock's own answer", name, ret)
	}
	if n, ret := d.GetNumaNodeId(); ret != nvml.ERROR_NOT_SUPPORTED || n != 0 {
		t.Errorf("GetNumaNodeId = %d, %v; want 0, ERROR_NOT_SUPPORTED", n, ret)
	}
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 0, Size: 1})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.GetComputeInstanceRemainingCapacity(&nvml.ComputeInstanceProfileInfo{}); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GpuInstance.GetComputeInstanceRemainingCapacity on a new instance = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		t.Errorf("Shutdown = %v: implemented methods must answer as the mock does", ret)
	}
}

// TestDeviceModelOnNVIDIAMocks: NVIDIA's mocks as they are (no wrapper) answer every call the
// MIG geometry reader makes; the geometry has one profile per profile NVIDIA configured, with
// unique names (the mocks report each profile's enum as its Id, unlike the hardware).
func TestDeviceModelOnNVIDIAMocks(t *testing.T) {
	for name, newServer := range nvidiaServers() {
		t.Run(name, func(t *testing.T) {
			s := newServer()
			dev := s.Devices[0].(*server.Device)
			model, _, err := nvmlmig.DeviceModel(dev)
			if err != nil {
				t.Fatal(err)
			}
			if len(model.Profiles) != len(dev.Config.MIGProfiles.GpuInstanceProfiles) {
				t.Errorf("%d profiles, want the %d the mock configures", len(model.Profiles), len(dev.Config.MIGProfiles.GpuInstanceProfiles))
			}
			checkUniqueProfileNames(t, model)
		})
	}
}

func checkUniqueProfileNames(t *testing.T, model *mig.Model) {
	t.Helper()
	seen := map[string]int{}
	for _, p := range model.Profiles {
		if id, ok := seen[p.Name]; ok {
			t.Errorf("profiles %d and %d are both named %s", id, p.ID, p.Name)
		}
		seen[p.Name] = p.ID
		if _, err := mig.ParseProfile(p.Name); err != nil {
			t.Errorf("profile %d: %v", p.ID, err)
		}
	}
}

// TestEnumerateNVIDIAMocks: enumeration and slice building on NVIDIA's mocks, where every call
// they do not implement answers ERROR_NOT_SUPPORTED: every GPU is served as the mock describes
// it, with no NUMA node and no PCI bus ID (the mocks give none, and none is made up), and both
// static and dynamic MIG slices build with unique device names.
func TestEnumerateNVIDIAMocks(t *testing.T) {
	for name, newServer := range nvidiaServers() {
		t.Run(name, func(t *testing.T) {
			s := newServer()
			inv, err := nvmlgpu.Enumerate(context.Background(), gputest.NotSupported(s))
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Errors) != 0 || len(inv.GPUs) != len(s.Devices) {
				t.Fatalf("%d GPUs, errors %v; want all %d", len(inv.GPUs), inv.Errors, len(s.Devices))
			}
			for i, g := range inv.GPUs {
				dev := s.Devices[i].(*server.Device)
				if g.UUID != dev.UUID || g.ProductName != dev.Config.Name || g.MemoryBytes != dev.Config.MemoryMB<<20 {
					t.Errorf("GPU %d: %s %q %d bytes; want %s %q %d", i, g.UUID, g.ProductName, g.MemoryBytes, dev.UUID, dev.Config.Name, dev.Config.MemoryMB<<20)
				}
				if g.PCIBusID != "" || g.NUMANode != -1 || !g.MIGCapable {
					t.Errorf("GPU %d: bus ID %q, NUMA node %d, MIG-capable %t; want none, -1, true", i, g.PCIBusID, g.NUMANode, g.MIGCapable)
				}
				if g.MIGGeometry == nil || g.MIGGeometry.Model == nil {
					t.Fatalf("GPU %d: no MIG geometry", i)
				}
			}
			for _, opts := range [][]gpudra.Option{nil, {gpudra.WithDynamicMIG(nil)}} {
				checkSlices(t, inv, opts...)
			}
		})
	}
}

// checkSlices builds the node's devices and checks their names are unique and no device has
// a PCI bus ID attribute.
func checkSlices(t *testing.T, inv *gpu.Inventory, opts ...gpudra.Option) {
	t.Helper()
	devs, err := gpudra.NewBuilder(opts...).Devices(inv)
	if err != nil {
		t.Fatalf("build devices: %v", err)
	}
	names := map[string]bool{}
	for _, d := range devs {
		if names[d.Name] {
			t.Errorf("device name %s twice", d.Name)
		}
		names[d.Name] = true
		if _, ok := d.Attributes[gpudra.StdAttrPCIBusID]; ok {
			t.Errorf("device %s has a PCI bus ID the mock never gave", d.Name)
		}
	}
	if len(devs) < len(inv.GPUs) {
		t.Errorf("%d devices for %d GPUs", len(devs), len(inv.GPUs))
	}
}

// TestMIGManagerOnNVIDIAMocks: the MIG instance manager creates, lists, removes instances and
// turns MIG off on NVIDIA's mocks, which list no MIG device handles (GetMaxMigDeviceCount is
// not implemented); enumeration then leaves the partitioned GPU out, since its MIG devices have
// no UUID to give a container, and serves the others.
func TestMIGManagerOnNVIDIAMocks(t *testing.T) {
	for name, newServer := range nvidiaServers() {
		t.Run(name, func(t *testing.T) {
			s := newServer()
			lib := gputest.NotSupported(s)
			dev, _ := lib.DeviceGetHandleByIndex(0)
			model, _, err := nvmlmig.DeviceModel(dev)
			if err != nil {
				t.Fatal(err)
			}
			mg, err := nvmlmig.NewInstanceManager(dev, model)
			if err != nil {
				t.Fatal(err)
			}
			layout := smallestTwo(t, model)
			if _, err := mg.Apply(layout); err != nil {
				t.Fatalf("Apply %s: %v", mig.FormatLayout(layout), err)
			}
			current, err := mg.Current()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := mig.FormatLayout(current), mig.FormatLayout(layout); got != want {
				t.Errorf("instances %s, want %s", got, want)
			}
			inv, err := nvmlgpu.Enumerate(context.Background(), lib, nvmlgpu.SkipFailedGPUs(true))
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Errors) != 1 || inv.Errors[0].Index != 0 || !errors.Is(inv.Errors[0], nvml.ERROR_NOT_SUPPORTED) || len(inv.GPUs) != len(s.Devices)-1 {
				t.Errorf("enumeration with MIG devices on GPU 0: %d GPUs, errors %v; want GPU 0 left out as not supported", len(inv.GPUs), inv.Errors)
			}
			if err := mg.Remove(current); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if changed, _, err := mg.DisableMIG(); err != nil || !changed {
				t.Errorf("DisableMIG = %t, %v; want MIG turned off", changed, err)
			}
			if mode, _, _ := dev.GetMigMode(); mode != nvml.DEVICE_MIG_DISABLE {
				t.Errorf("MIG mode %d after DisableMIG", mode)
			}
		})
	}
}

// smallestTwo is a layout of the smallest plain profile at its first two placements.
func smallestTwo(t *testing.T, model *mig.Model) []mig.Instance {
	t.Helper()
	ps := slices.Clone(model.Profiles)
	slices.SortStableFunc(ps, func(a, b mig.GIProfile) int { return a.MemorySlices() - b.MemorySlices() })
	for _, p := range ps {
		if !strings.ContainsAny(p.Name, "+-") && len(p.Placements) >= 2 {
			return []mig.Instance{mig.At(p.Name, p.Placements[0].Start), mig.At(p.Name, p.Placements[1].Start)}
		}
	}
	t.Fatal("no profile with two placements")
	return nil
}
