package gputest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpudra/gpudra/mig"
)

func mustNew(t testing.TB, name string, opts ...Option) *Machine {
	t.Helper()
	m, err := New(name, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return m
}

func dev(t testing.TB, m *Machine, i int) nvml.Device {
	t.Helper()
	d, ret := m.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
	}
	return d
}

func giInfo(t testing.TB, d nvml.Device, enum int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(enum)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%d): %v", enum, ret)
	}
	return info
}

type gpuSummary struct {
	Name      string
	Arch      nvml.DeviceArchitecture
	CC        [2]int
	MemoryMiB uint64
	BusID     string
	NUMA      int
	MIG       nvml.Return // GetMigMode's return
}

func summarize(t *testing.T, d nvml.Device) gpuSummary {
	t.Helper()
	var s gpuSummary
	var ret nvml.Return
	s.Name, _ = d.GetName()
	s.Arch, _ = d.GetArchitecture()
	s.CC[0], s.CC[1], _ = d.GetCudaComputeCapability()
	mem, _ := d.GetMemoryInfo()
	s.MemoryMiB = mem.Total >> 20
	pci, _ := d.GetPciInfo()
	var b strings.Builder
	for _, c := range pci.BusIdLegacy {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	s.BusID = b.String()
	s.NUMA, _ = d.GetNumaNodeId()
	_, _, ret = d.GetMigMode()
	s.MIG = ret
	return s
}

func TestMachinesFirstAndLastGPU(t *testing.T) {
	tests := []struct {
		machine     string
		n           int
		first, last gpuSummary
	}{
		{"dgx-a100-40gb", 8,
			gpuSummary{"NVIDIA A100-SXM4-40GB", nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, 40960, "0000:07:00.0", 3, nvml.SUCCESS},
			gpuSummary{"NVIDIA A100-SXM4-40GB", nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, 40960, "0000:bd:00.0", 5, nvml.SUCCESS}},
		{"dgx-a100-80gb", 8,
			gpuSummary{"NVIDIA A100-SXM4-80GB", nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, 81920, "0000:07:00.0", 3, nvml.SUCCESS},
			gpuSummary{"NVIDIA A100-SXM4-80GB", nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, 81920, "0000:bd:00.0", 5, nvml.SUCCESS}},
		{"dgx-h100", 8,
			gpuSummary{"NVIDIA H100 80GB HBM3", nvml.DEVICE_ARCH_HOPPER, [2]int{9, 0}, 81559, "0000:1b:00.0", 0, nvml.SUCCESS},
			gpuSummary{"NVIDIA H100 80GB HBM3", nvml.DEVICE_ARCH_HOPPER, [2]int{9, 0}, 81559, "0000:df:00.0", 1, nvml.SUCCESS}},
		{"dgx-h200", 8,
			gpuSummary{"NVIDIA H200", nvml.DEVICE_ARCH_HOPPER, [2]int{9, 0}, 143771, "0000:1b:00.0", 0, nvml.SUCCESS},
			gpuSummary{"NVIDIA H200", nvml.DEVICE_ARCH_HOPPER, [2]int{9, 0}, 143771, "0000:df:00.0", 1, nvml.SUCCESS}},
		{"dgx-b200", 8,
			gpuSummary{"NVIDIA B200", nvml.DEVICE_ARCH_BLACKWELL, [2]int{10, 0}, 183359, "0000:1b:00.0", 0, nvml.SUCCESS},
			gpuSummary{"NVIDIA B200", nvml.DEVICE_ARCH_BLACKWELL, [2]int{10, 0}, 183359, "0000:df:00.0", 1, nvml.SUCCESS}},
		{"a30x4", 4,
			gpuSummary{"NVIDIA A30", nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, 24576, "0000:17:00.0", 0, nvml.SUCCESS},
			gpuSummary{"NVIDIA A30", nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, 24576, "0000:e3:00.0", 1, nvml.SUCCESS}},
		{"l4x8", 8,
			gpuSummary{"NVIDIA L4", nvml.DEVICE_ARCH_ADA, [2]int{8, 9}, 23034, "0000:38:00.0", 0, nvml.ERROR_NOT_SUPPORTED},
			gpuSummary{"NVIDIA L4", nvml.DEVICE_ARCH_ADA, [2]int{8, 9}, 23034, "0000:be:00.0", 1, nvml.ERROR_NOT_SUPPORTED}},
		{"a10gx4", 4,
			gpuSummary{"NVIDIA A10G", nvml.DEVICE_ARCH_AMPERE, [2]int{8, 6}, 23028, "0000:00:1b.0", 0, nvml.ERROR_NOT_SUPPORTED},
			gpuSummary{"NVIDIA A10G", nvml.DEVICE_ARCH_AMPERE, [2]int{8, 6}, 23028, "0000:00:1e.0", 0, nvml.ERROR_NOT_SUPPORTED}},
		{"rtx-pro-6000x4", 4,
			gpuSummary{"NVIDIA RTX PRO 6000 Blackwell Server Edition", nvml.DEVICE_ARCH_BLACKWELL, [2]int{12, 0}, 97887, "0000:01:00.0", 0, nvml.SUCCESS},
			gpuSummary{"NVIDIA RTX PRO 6000 Blackwell Server Edition", nvml.DEVICE_ARCH_BLACKWELL, [2]int{12, 0}, 97887, "0000:a1:00.0", 1, nvml.SUCCESS}},
		{"gb200-nvl4", 4,
			gpuSummary{"NVIDIA GB200", nvml.DEVICE_ARCH_BLACKWELL, [2]int{10, 0}, 189471, "0008:01:00.0", 0, nvml.SUCCESS},
			gpuSummary{"NVIDIA GB200", nvml.DEVICE_ARCH_BLACKWELL, [2]int{10, 0}, 189471, "0019:01:00.0", 1, nvml.SUCCESS}},
	}
	if got, want := len(tests), len(Machines()); got != want {
		t.Fatalf("test covers %d machines, Machines() lists %d", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.machine, func(t *testing.T) {
			m := mustNew(t, tt.machine)
			n, ret := m.DeviceGetCount()
			if ret != nvml.SUCCESS || n != tt.n {
				t.Fatalf("DeviceGetCount() = %d, %v; want %d", n, ret, tt.n)
			}
			if diff := cmp.Diff(tt.first, summarize(t, dev(t, m, 0))); diff != "" {
				t.Errorf("GPU 0 (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.last, summarize(t, dev(t, m, n-1))); diff != "" {
				t.Errorf("GPU %d (-want +got):\n%s", n-1, diff)
			}
		})
	}
}

func TestCatalogCoversMachines(t *testing.T) {
	for _, name := range Machines() {
		m := mustNew(t, name)
		for i, d := range m.devices {
			if d.model.migCapable && d.geometry == nil {
				t.Errorf("%s GPU %d: mig catalog has no geometry for %q", name, i, d.model.productName)
			}
		}
	}
}

func TestUUIDsStableAndUnique(t *testing.T) {
	seen := map[string]string{}
	for _, name := range Machines() {
		a, b := mustNew(t, name), mustNew(t, name)
		for i := range a.NumGPUs() {
			ua, _ := dev(t, a, i).GetUUID()
			ub, _ := dev(t, b, i).GetUUID()
			if ua != ub {
				t.Errorf("%s GPU %d: UUID %s then %s; want stable", name, i, ua, ub)
			}
			if !strings.HasPrefix(ua, "GPU-") || len(ua) != 40 {
				t.Errorf("%s GPU %d: UUID %q is not GPU-<uuid>", name, i, ua)
			}
			if prev, dup := seen[ua]; dup {
				t.Errorf("%s GPU %d: UUID %s already used by %s", name, i, ua, prev)
			}
			seen[ua] = name
			byUUID, ret := a.DeviceGetHandleByUUID(ua)
			if ret != nvml.SUCCESS || byUUID != dev(t, a, i) {
				t.Errorf("%s: DeviceGetHandleByUUID(%s) = %v, %v", name, ua, byUUID, ret)
			}
		}
	}
}

func TestNewUnknownMachine(t *testing.T) {
	_, err := New("dgx-z900")
	if err == nil {
		t.Fatal("New(dgx-z900) succeeded")
	}
	for _, name := range Machines() {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not list %s", err, name)
		}
	}
}

func TestVersions(t *testing.T) {
	m := mustNew(t, "l4x8")
	if v, _ := m.SystemGetDriverVersion(); v != DefaultDriverVersion {
		t.Errorf("driver %q, want %q", v, DefaultDriverVersion)
	}
	if v, _ := m.SystemGetCudaDriverVersion(); v != 13000 {
		t.Errorf("cuda %d, want 13000", v)
	}
	m = mustNew(t, "l4x8", WithDriverVersion("550.54.15"), WithCUDADriverVersion(12040))
	if v, _ := m.SystemGetDriverVersion(); v != "550.54.15" {
		t.Errorf("driver %q, want 550.54.15", v)
	}
	if v, _ := m.SystemGetCudaDriverVersion(); v != 12040 {
		t.Errorf("cuda %d, want 12040", v)
	}
}

// The go-nvml mocks report Id == enum; hardware does not.
func TestProfileIDsAreNotEnums(t *testing.T) {
	tests := []struct {
		machine string
		enum    int
		wantID  uint32
		slices  uint32
	}{
		{"dgx-a100-40gb", nvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, 1},
		{"dgx-a100-40gb", nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1},
		{"dgx-a100-40gb", nvml.GPU_INSTANCE_PROFILE_2_SLICE, 14, 2},
		{"dgx-a100-40gb", nvml.GPU_INSTANCE_PROFILE_3_SLICE, 9, 3},
		{"dgx-a100-40gb", nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, 7},
		{"dgx-h100", nvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, 1},
		{"a30x4", nvml.GPU_INSTANCE_PROFILE_1_SLICE, 14, 1},
	}
	for _, tt := range tests {
		m := mustNew(t, tt.machine)
		info := giInfo(t, dev(t, m, 0), tt.enum)
		if info.Id != tt.wantID || info.SliceCount != tt.slices {
			t.Errorf("%s enum %d: Id %d SliceCount %d, want Id %d SliceCount %d", tt.machine, tt.enum, info.Id, info.SliceCount, tt.wantID, tt.slices)
		}
	}
	m := mustNew(t, "dgx-a100-40gb")
	if _, ret := dev(t, m, 0).GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_COUNT); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("enum COUNT: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, ret := dev(t, m, 0).GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("gfx enum on A100: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	// A placement query with the enum mistaken for the Id finds another profile (7g, Id 0).
	pl, _ := dev(t, m, 0).GetGpuInstancePossiblePlacements(&nvml.GpuInstanceProfileInfo{Id: nvml.GPU_INSTANCE_PROFILE_1_SLICE})
	if diff := cmp.Diff([]nvml.GpuInstancePlacement{{Start: 0, Size: 8}}, pl); diff != "" {
		t.Errorf("placements of Id 0 (-want +got):\n%s", diff)
	}
}

type step struct {
	enum  int
	start int // -1: CreateGpuInstance without placement
	want  nvml.Return
}

func TestCreateGpuInstance(t *testing.T) {
	const (
		p1   = nvml.GPU_INSTANCE_PROFILE_1_SLICE
		p1me = nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1
		p2   = nvml.GPU_INSTANCE_PROFILE_2_SLICE
		p3   = nvml.GPU_INSTANCE_PROFILE_3_SLICE
		p4   = nvml.GPU_INSTANCE_PROFILE_4_SLICE
		p7   = nvml.GPU_INSTANCE_PROFILE_7_SLICE
	)
	ok := nvml.SUCCESS
	insufficient := nvml.ERROR_INSUFFICIENT_RESOURCES
	tests := []struct {
		name       string
		machine    string
		migEnabled bool
		steps      []step
		wantLayout []mig.Placement
	}{
		{"overlapping 7g rejected", "dgx-a100-40gb", true,
			[]step{{p7, 0, ok}, {p7, 0, insufficient}}, []mig.Placement{{Start: 0, Size: 8}}},
		{"3g covers 4 memory slices", "dgx-a100-40gb", true,
			[]step{{p3, 0, ok}, {p1, 3, insufficient}, {p1, 4, ok}, {p3, 4, insufficient}},
			[]mig.Placement{{Start: 0, Size: 4}, {Start: 4, Size: 1}}},
		{"placement not allowed", "dgx-a100-40gb", true,
			[]step{{p3, 2, nvml.ERROR_INVALID_ARGUMENT}, {p4, 4, nvml.ERROR_INVALID_ARGUMENT}}, nil},
		{"1g count 7", "dgx-a100-40gb", true,
			[]step{{p1, -1, ok}, {p1, -1, ok}, {p1, -1, ok}, {p1, -1, ok}, {p1, -1, ok}, {p1, -1, ok}, {p1, -1, ok}, {p1, -1, insufficient}},
			[]mig.Placement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}, {Start: 4, Size: 1}, {Start: 5, Size: 1}, {Start: 6, Size: 1}}},
		{"+me count 1", "dgx-a100-40gb", true,
			[]step{{p1me, 0, ok}, {p1me, 1, insufficient}}, []mig.Placement{{Start: 0, Size: 1}}},
		{"balanced, small first", "dgx-a100-40gb", true,
			[]step{{p1, -1, ok}, {p1, -1, ok}, {p2, -1, ok}, {p3, -1, ok}, {p1, -1, insufficient}},
			[]mig.Placement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 2}, {Start: 4, Size: 4}}},
		// Without placements the first free one is taken, so creation order matters, as on
		// hardware: 3g takes 0-3, 2g 4-5, 1g 6, and no 1g placement is left (1g cannot start at 7).
		{"balanced, large first", "dgx-a100-40gb", true,
			[]step{{p3, -1, ok}, {p2, -1, ok}, {p1, -1, ok}, {p1, -1, insufficient}},
			[]mig.Placement{{Start: 0, Size: 4}, {Start: 4, Size: 2}, {Start: 6, Size: 1}}},
		{"MIG disabled", "dgx-a100-40gb", false,
			[]step{{p1, -1, nvml.ERROR_NOT_SUPPORTED}, {p1, 0, nvml.ERROR_NOT_SUPPORTED}}, nil},
		{"A30 has 4 slices", "a30x4", true,
			[]step{{p2, 2, ok}, {p2, 0, ok}, {p1, -1, insufficient}}, []mig.Placement{{Start: 0, Size: 2}, {Start: 2, Size: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustNew(t, tt.machine)
			d := dev(t, m, 0)
			if tt.migEnabled {
				if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
					t.Fatalf("SetMigMode: %v", ret)
				}
			}
			for i, s := range tt.steps {
				info := giInfo(t, d, s.enum)
				var ret nvml.Return
				if s.start < 0 {
					_, ret = d.CreateGpuInstance(&info)
				} else {
					size := uint32(1)
					if pls, _ := d.GetGpuInstancePossiblePlacements(&info); len(pls) > 0 {
						size = pls[0].Size
					}
					_, ret = d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(s.start), Size: size})
				}
				if ret != s.want {
					t.Errorf("step %d (enum %d at %d): %v, want %v", i, s.enum, s.start, ret, s.want)
				}
			}
			var got []mig.Placement
			for _, gi := range m.GPUInstances(0) {
				got = append(got, gi.Placement)
			}
			if diff := cmp.Diff(tt.wantLayout, got, cmpSortPlacements); diff != "" {
				t.Errorf("layout (-want +got):\n%s", diff)
			}
		})
	}
}

var cmpSortPlacements = cmpopts.SortSlices(func(a, b mig.Placement) bool { return a.Start < b.Start })

func TestNonMIGGPUs(t *testing.T) {
	for _, name := range []string{"l4x8", "a10gx4"} {
		m := mustNew(t, name)
		d := dev(t, m, 0)
		if _, _, ret := d.GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s GetMigMode: %v", name, ret)
		}
		if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s SetMigMode: %v", name, ret)
		}
		if _, ret := d.GetGpuInstanceProfileInfo(0); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s GetGpuInstanceProfileInfo: %v", name, ret)
		}
		if _, ret := d.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s GetMigDeviceHandleByIndex: %v", name, ret)
		}
		if _, ret := d.GetGpuInstanceId(); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s GetGpuInstanceId: %v", name, ret)
		}
		if n, ret := d.GetMaxMigDeviceCount(); n != 0 || ret != nvml.SUCCESS {
			t.Errorf("%s GetMaxMigDeviceCount: %d, %v; want 0, SUCCESS (nvml.h)", name, n, ret)
		}
		if is, ret := d.IsMigDeviceHandle(); is || ret != nvml.SUCCESS {
			t.Errorf("%s IsMigDeviceHandle: %v, %v", name, is, ret)
		}
		if _, err := New(name, WithMIG(0, "1g.5gb")); err == nil || !strings.Contains(err.Error(), "does not support MIG") {
			t.Errorf("%s WithMIG: %v, want a no-MIG error", name, err)
		}
	}
}

// A MIG-capable GPU with MIG mode off answers the calls that need MIG mode with NOT_SUPPORTED
// (the profiles and their placements stay readable), as NVML does.
func TestMIGModeOff(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb")
	d := dev(t, m, 0)
	if cur, _, ret := d.GetMigMode(); ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_DISABLE {
		t.Fatalf("GetMigMode: %d, %v; want MIG disabled", cur, ret)
	}
	info := giInfo(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, ret := d.GetGpuInstancePossiblePlacements(&info); ret != nvml.SUCCESS {
		t.Errorf("GetGpuInstancePossiblePlacements: %v, want SUCCESS", ret)
	}
	for call, ret := range map[string]nvml.Return{
		"GetGpuInstanceRemainingCapacity": func() nvml.Return { _, ret := d.GetGpuInstanceRemainingCapacity(&info); return ret }(),
		"GetGpuInstances":                 func() nvml.Return { _, ret := d.GetGpuInstances(&info); return ret }(),
		"GetGpuInstanceById":              func() nvml.Return { _, ret := d.GetGpuInstanceById(1); return ret }(),
		"GetMigDeviceHandleByIndex":       func() nvml.Return { _, ret := d.GetMigDeviceHandleByIndex(0); return ret }(),
		"CreateGpuInstance":               func() nvml.Return { _, ret := d.CreateGpuInstance(&info); return ret }(),
	} {
		if ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s with MIG mode off: %v, want ERROR_NOT_SUPPORTED", call, ret)
		}
	}
	if n, ret := d.GetMaxMigDeviceCount(); n != 0 || ret != nvml.SUCCESS {
		t.Errorf("GetMaxMigDeviceCount: %d, %v; want 0, SUCCESS (nvml.h)", n, ret)
	}
}

func TestRemainingCapacity(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb", WithMIG(0, "3g.20gb@4", "1g.5gb@1"))
	d := dev(t, m, 0)
	for _, tt := range []struct {
		enum int
		want int
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 3},      // 0, 2, 3 free; 1 taken
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 1},      // only 2-3
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0},      // 0-3 blocked by the 1g at 1
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0},      // nothing
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1}, // 2-3
	} {
		info := giInfo(t, d, tt.enum)
		got, ret := d.GetGpuInstanceRemainingCapacity(&info)
		if ret != nvml.SUCCESS || got != tt.want {
			t.Errorf("enum %d: %d, %v; want %d", tt.enum, got, ret, tt.want)
		}
	}
}

func TestMIGDeviceHandles(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb", WithMIG(2, "1g.5gb", "1g.5gb", "2g.10gb", "1c.3g.20gb"))
	d := dev(t, m, 2)
	max, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS || max != 7 {
		t.Fatalf("GetMaxMigDeviceCount: %d, %v", max, ret)
	}
	parentUUID, _ := d.GetUUID()
	type migDev struct {
		Name       string
		GI, CI     int
		IsMIG      bool
		SameParent bool
		Attr       nvml.DeviceAttributes
	}
	var got []migDev
	seen := map[string]bool{}
	for i := range max {
		md, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			t.Fatalf("GetMigDeviceHandleByIndex(%d): %v", i, ret)
		}
		var g migDev
		g.Name, _ = md.GetName()
		g.GI, _ = md.GetGpuInstanceId()
		g.CI, _ = md.GetComputeInstanceId()
		g.IsMIG, _ = md.IsMigDeviceHandle()
		p, _ := md.GetDeviceHandleFromMigDeviceHandle()
		g.SameParent = p == d
		g.Attr, _ = md.GetAttributes()
		u, _ := md.GetUUID()
		if !strings.HasPrefix(u, "MIG-") || seen[u] || u == parentUUID {
			t.Errorf("MIG device %d: bad or repeated UUID %q", i, u)
		}
		seen[u] = true
		if idx, _ := md.GetIndex(); idx != i {
			t.Errorf("MIG device %d: GetIndex %d", i, idx)
		}
		got = append(got, g)
	}
	const n = "NVIDIA A100-SXM4-40GB MIG "
	want := []migDev{
		{n + "1c.3g.20gb", 1, 0, true, true, nvml.DeviceAttributes{MultiprocessorCount: 14, SharedCopyEngineCount: 3, SharedDecoderCount: 2, GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 1, MemorySizeMB: 19968}},
		{n + "2g.10gb", 5, 0, true, true, nvml.DeviceAttributes{MultiprocessorCount: 28, SharedCopyEngineCount: 2, SharedDecoderCount: 1, GpuInstanceSliceCount: 2, ComputeInstanceSliceCount: 2, MemorySizeMB: 9856}},
		{n + "1g.5gb", 13, 0, true, true, nvml.DeviceAttributes{MultiprocessorCount: 14, SharedCopyEngineCount: 1, GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}},
		{n + "1g.5gb", 14, 0, true, true, nvml.DeviceAttributes{MultiprocessorCount: 14, SharedCopyEngineCount: 1, GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MIG devices (-want +got):\n%s", diff)
	}
	if _, ret := d.GetMigDeviceHandleByIndex(7); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("index 7: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, ret := d.GetMigDeviceHandleByIndex(4); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("index 4: %v, want ERROR_NOT_FOUND", ret)
	}
	if _, ret := d.GetGpuInstanceId(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetGpuInstanceId on the parent: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	gi, ret := d.GetGpuInstanceById(5)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceById(5): %v", ret)
	}
	info, _ := gi.GetInfo()
	if info.ProfileId != 14 || info.Placement != (nvml.GpuInstancePlacement{Start: 2, Size: 2}) || info.Device != d {
		t.Errorf("GI 5 info %+v", info)
	}
	if _, ret := d.GetGpuInstanceById(2); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetGpuInstanceById(2): %v", ret)
	}
}

func TestLifecycleErrors(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb", WithMIG(0, "7g.40gb"))
	d := dev(t, m, 0)
	if act, ret := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.ERROR_IN_USE || act != nvml.SUCCESS {
		t.Errorf("SetMigMode(disable) with instances: activation status %v, return %v; want the call refused with ERROR_IN_USE (status unset)", act, ret)
	}
	md, _ := d.GetMigDeviceHandleByIndex(0)
	gi, _ := d.GetGpuInstanceById(0)
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("GI Destroy with a CI: %v, want ERROR_IN_USE", ret)
	}
	ci, _ := gi.GetComputeInstanceById(0)
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatalf("CI Destroy: %v", ret)
	}
	if _, ret := md.GetUUID(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("stale MIG handle GetUUID: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatalf("GI Destroy: %v", ret)
	}
	if _, ret := gi.GetInfo(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("destroyed GI GetInfo: %v", ret)
	}
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.SUCCESS {
		t.Errorf("SetMigMode(disable) empty: %v", ret)
	}
	if cur, pend, _ := d.GetMigMode(); cur != 0 || pend != 0 {
		t.Errorf("mode %d/%d after disable", cur, pend)
	}
}

func TestComputeInstances(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb", WithMIG(0))
	d := dev(t, m, 0)
	info := giInfo(t, d, nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	gi, ret := d.CreateGpuInstance(&info)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	c3, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	pls, _ := gi.GetComputeInstancePossiblePlacements(&c3)
	if len(pls) == 0 {
		t.Fatal("no placements for a 3-slice compute instance in 7g")
	}
	if _, ret := gi.CreateComputeInstanceWithPlacement(&c3, &pls[0]); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.CreateComputeInstanceWithPlacement(&c3, &pls[0]); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("overlapping CI: %v", ret)
	}
	c1, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	left, _ := gi.GetComputeInstanceRemainingCapacity(&c1)
	created := 0
	for {
		if _, ret := gi.CreateComputeInstance(&c1); ret != nvml.SUCCESS {
			if ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
				t.Errorf("CreateComputeInstance: %v", ret)
			}
			break
		}
		created++
	}
	if created != left || created != 7-3 {
		t.Errorf("created %d 1-slice CIs beside a 3-slice one, remaining capacity said %d; want 4", created, left)
	}
	if n, _ := d.GetMaxMigDeviceCount(); n != 7 {
		t.Errorf("max %d", n)
	}
	cis, _ := gi.GetComputeInstances(&c1)
	if len(cis) != 4 {
		t.Errorf("GetComputeInstances(1c): %d", len(cis))
	}
}

func TestWithMIGErrors(t *testing.T) {
	tests := []struct {
		opt  Option
		want string
	}{
		{WithMIG(0, "5g.30gb"), "unknown on A100-SXM4-40GB"},
		{WithMIG(0, "3g.20gb@2"), "allowed starts: 0, 4"},
		{WithMIG(0, "3g.20gb", "3g.20gb", "1g.5gb"), "do not fit"},
		{WithMIG(0, "1g.5gb+me", "1g.5gb+me"), "CreateGpuInstanceWithPlacement: ERROR_INSUFFICIENT_RESOURCES"},
		{WithMIG(9), "has no GPU 9"},
		{WithMIG(0, "3g.20gb@x"), "not a number"},
	}
	for _, tt := range tests {
		_, err := New("dgx-a100-40gb", tt.opt)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want it to contain %q", err, tt.want)
		}
	}
	// A layout that only fits when placed in the other order.
	m := mustNew(t, "dgx-a100-40gb", WithMIG(1, "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "3g.20gb"))
	if n := len(m.GPUInstances(1)); n != 5 {
		t.Errorf("4x1g.5gb+3g.20gb: %d instances", n)
	}
}

func TestFaults(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb",
		WithFault("GetUUID", 3, nvml.ERROR_GPU_IS_LOST),
		WithFaultAfter("GpuInstance.Destroy", 0, nvml.ERROR_UNKNOWN),
		WithMIG(0, "7g.40gb"))
	var rets []nvml.Return
	for i := range 4 {
		_, ret := dev(t, m, i).GetUUID()
		rets = append(rets, ret)
	}
	if diff := cmp.Diff([]nvml.Return{nvml.SUCCESS, nvml.SUCCESS, nvml.ERROR_GPU_IS_LOST, nvml.SUCCESS}, rets); diff != "" {
		t.Errorf("GetUUID returns (-want +got):\n%s", diff)
	}
	if got := m.Calls("GetUUID"); got != 4 {
		t.Errorf("Calls(GetUUID) = %d", got)
	}
	d := dev(t, m, 0)
	gi, _ := d.GetGpuInstanceById(0)
	ci, _ := gi.GetComputeInstanceById(0)
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Errorf("ComputeInstance.Destroy hit the GpuInstance fault: %v", ret)
	}
	for range 2 {
		if ret := gi.Destroy(); ret != nvml.ERROR_UNKNOWN {
			t.Errorf("GpuInstance.Destroy: %v", ret)
		}
	}
	if m.Calls("Destroy") != 3 || m.Calls("GpuInstance.Destroy") != 2 || m.Calls("ComputeInstance.Destroy") != 1 {
		t.Errorf("Destroy calls %d/%d/%d", m.Calls("Destroy"), m.Calls("GpuInstance.Destroy"), m.Calls("ComputeInstance.Destroy"))
	}
	m.ClearFaults()
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Errorf("Destroy after ClearFaults: %v", ret)
	}
	// A fault injected later counts from then on.
	info := giInfo(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if err := m.InjectFault("CreateGpuInstanceWithPlacement", 2, nvml.ERROR_NO_PERMISSION); err != nil {
		t.Fatal(err)
	}
	var got []nvml.Return
	for s := range 3 {
		_, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(s), Size: 1})
		got = append(got, ret)
	}
	if diff := cmp.Diff([]nvml.Return{nvml.SUCCESS, nvml.ERROR_NO_PERMISSION, nvml.SUCCESS}, got); diff != "" {
		t.Errorf("CreateGpuInstanceWithPlacement (-want +got):\n%s", diff)
	}
	// Unmodelled methods are counted, faultable and answer NOT_SUPPORTED.
	if _, ret := d.GetPowerUsage(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetPowerUsage: %v", ret)
	}
	if err := m.InjectFault("GetPowerUsage", 1, nvml.ERROR_TIMEOUT); err != nil {
		t.Fatal(err)
	}
	if _, ret := d.GetPowerUsage(); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("GetPowerUsage with fault: %v", ret)
	}
	for _, bad := range []Option{WithFault("", 1, nvml.ERROR_UNKNOWN), WithFault("GetUUID", 0, nvml.ERROR_UNKNOWN), WithFault("GetUUID", 1, nvml.SUCCESS)} {
		if _, err := New("l4x8", bad); err == nil {
			t.Error("bad fault accepted")
		}
	}
}

func TestInterfaceForwarding(t *testing.T) {
	m := mustNew(t, "dgx-h100")
	d := dev(t, m, 3)
	u1, _ := d.GetUUID()
	u2, ret := m.DeviceGetUUID(d)
	if ret != nvml.SUCCESS || u1 != u2 {
		t.Errorf("DeviceGetUUID: %q, %v; want %q", u2, ret, u1)
	}
	if m.Calls("DeviceGetUUID") != 1 || m.Calls("GetUUID") != 2 {
		t.Errorf("calls %d/%d", m.Calls("DeviceGetUUID"), m.Calls("GetUUID"))
	}
	if _, ret := m.DeviceGetPowerUsage(d); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("DeviceGetPowerUsage: %v", ret)
	}
	if _, ret := m.DeviceGetHandleByIndex(8); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("index 8: %v", ret)
	}
	byBus, ret := m.DeviceGetHandleByPciBusId("00000000:1B:00.0")
	if ret != nvml.SUCCESS || byBus != dev(t, m, 0) {
		t.Errorf("DeviceGetHandleByPciBusId: %v", ret)
	}
	if m.Init() != nvml.SUCCESS || m.Shutdown() != nvml.SUCCESS || m.Shutdown() != nvml.ERROR_UNINITIALIZED {
		t.Error("Init/Shutdown pairing")
	}
}

func TestTopology(t *testing.T) {
	a100 := mustNew(t, "dgx-a100-40gb")
	lvl := func(m *Machine, i, j int) nvml.GpuTopologyLevel {
		l, ret := dev(t, m, i).GetTopologyCommonAncestor(dev(t, m, j))
		if ret != nvml.SUCCESS {
			t.Fatalf("GetTopologyCommonAncestor(%d,%d): %v", i, j, ret)
		}
		return l
	}
	if got := []nvml.GpuTopologyLevel{lvl(a100, 0, 0), lvl(a100, 0, 1), lvl(a100, 0, 2)}; !cmp.Equal(got, []nvml.GpuTopologyLevel{nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_MULTIPLE, nvml.TOPOLOGY_SYSTEM}) {
		t.Errorf("DGX A100 levels %v", got)
	}
	h100 := mustNew(t, "dgx-h100")
	if got := []nvml.GpuTopologyLevel{lvl(h100, 0, 3), lvl(h100, 0, 4)}; !cmp.Equal(got, []nvml.GpuTopologyLevel{nvml.TOPOLOGY_NODE, nvml.TOPOLOGY_SYSTEM}) {
		t.Errorf("DGX H100 levels %v", got)
	}
	a10g := mustNew(t, "a10gx4")
	if got := lvl(a10g, 0, 3); got != nvml.TOPOLOGY_HOSTBRIDGE {
		t.Errorf("A10G level %v", got)
	}
	if st, _ := dev(t, a10g, 0).GetP2PStatus(dev(t, a10g, 1), nvml.P2P_CAPS_INDEX_NVLINK); st != nvml.P2P_STATUS_NOT_SUPPORTED {
		t.Errorf("A10G NVLink P2P %v", st)
	}
	if _, ret := dev(t, a10g, 0).GetNvLinkState(0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("A10G NVLink state %v", ret)
	}
	if st, _ := dev(t, h100, 0).GetP2PStatus(dev(t, h100, 7), nvml.P2P_CAPS_INDEX_NVLINK); st != nvml.P2P_STATUS_OK {
		t.Errorf("H100 NVLink P2P %v", st)
	}
	if typ, _ := dev(t, h100, 0).GetNvLinkRemoteDeviceType(17); typ != nvml.NVLINK_DEVICE_TYPE_SWITCH {
		t.Errorf("H100 link 17 remote %v", typ)
	}
	if _, ret := dev(t, h100, 0).GetNvLinkState(18); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("H100 link 18: %v", ret)
	}
	if _, ret := dev(t, h100, 0).GetGpuFabricInfo(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("H100 fabric: %v", ret)
	}
	gb := mustNew(t, "gb200-nvl4")
	// A GB200 compute tray: each GPU has one NVLink to each of the rack's 18 NVLink switch chips.
	chips := map[uint32]bool{}
	for l := range 18 {
		p, ret := dev(t, gb, 0).GetNvLinkRemotePciInfo(l)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		typ, ret := dev(t, gb, 0).GetNvLinkRemoteDeviceType(l)
		if ret != nvml.SUCCESS || typ != nvml.NVLINK_DEVICE_TYPE_SWITCH {
			t.Errorf("GB200 GPU 0 link %d remote type %v, %v; want a switch", l, typ, ret)
		}
		chips[p.Bus<<8|p.Device] = true
	}
	if len(chips) != 18 {
		t.Errorf("GB200 GPU 0 links reach %d switch chips, want 18", len(chips))
	}
	f0, ret := dev(t, gb, 0).GetGpuFabricInfo()
	f3, _ := dev(t, gb, 3).GetGpuFabricInfo()
	if ret != nvml.SUCCESS || f0.State != nvml.GPU_FABRIC_STATE_COMPLETED || f0.ClusterUuid != f3.ClusterUuid || f0.CliqueId != f3.CliqueId {
		t.Errorf("GB200 fabric %+v / %+v, %v", f0, f3, ret)
	}
}

func TestEvents(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb")
	set, ret := m.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	d1 := dev(t, m, 1)
	if ret := d1.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := d1.RegisterEvents(nvml.EventTypePowerSourceChange, set); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("unsupported event type: %v", ret)
	}
	if _, ret := set.Wait(1); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("empty Wait: %v", ret)
	}
	if err := m.InjectXID(0, 31); err != nil { // GPU 0 is not registered
		t.Fatal(err)
	}
	if err := m.InjectXID(1, 79); err != nil {
		t.Fatal(err)
	}
	e, ret := set.Wait(1000)
	if ret != nvml.SUCCESS || e.Device != d1 || e.EventData != 79 || e.EventType != nvml.EventTypeXidCriticalError || e.GpuInstanceId != noInstance {
		t.Errorf("Wait: %+v, %v", e, ret)
	}
	// A waiter blocked in Wait is woken by an injection.
	done := make(chan nvml.EventData)
	go func() {
		e, _ := set.Wait(5000)
		done <- e
	}()
	time.Sleep(10 * time.Millisecond)
	if err := m.InjectMIGXID(1, 7, 0, 94); err != nil {
		t.Fatal(err)
	}
	if e := <-done; e.EventData != 94 || e.GpuInstanceId != 7 || e.ComputeInstanceId != 0 {
		t.Errorf("MIG XID event %+v", e)
	}
	if err := m.InjectGPULost(1); err != nil {
		t.Fatal(err)
	}
	if _, ret := set.Wait(1000); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("Wait after loss: %v", ret)
	}
	if _, ret := d1.GetUUID(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("GetUUID of lost GPU: %v", ret)
	}
	if _, ret := d1.GetPowerUsage(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("unmodelled call on lost GPU: %v", ret)
	}
	if err := m.RecoverGPU(1); err != nil {
		t.Fatal(err)
	}
	if _, ret := d1.GetUUID(); ret != nvml.SUCCESS {
		t.Errorf("GetUUID after recovery: %v", ret)
	}
	if ret := set.Free(); ret != nvml.SUCCESS {
		t.Errorf("Free: %v", ret)
	}
	if err := m.InjectXID(8, 1); err == nil {
		t.Error("InjectXID on GPU 8 succeeded")
	}
}

// Parallel MIG work on all GPUs, run under -race.
func TestConcurrentUse(t *testing.T) {
	m := mustNew(t, "dgx-h100", WithMIGAll())
	var wg sync.WaitGroup
	for i := range m.NumGPUs() {
		wg.Go(func() {
			d := dev(t, m, i)
			info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			for range 20 {
				gi, ret := d.CreateGpuInstance(&info)
				if ret != nvml.SUCCESS {
					t.Errorf("GPU %d create: %v", i, ret)
					return
				}
				ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				ci, ret := gi.CreateComputeInstance(&ciInfo)
				if ret != nvml.SUCCESS {
					t.Errorf("GPU %d CI: %v", i, ret)
					return
				}
				_, _ = m.DeviceGetCount()
				_ = m.GPUInstances(i)
				ci.Destroy()
				gi.Destroy()
			}
		})
	}
	wg.Wait()
	for i := range m.NumGPUs() {
		if n := len(m.GPUInstances(i)); n != 0 {
			t.Errorf("GPU %d: %d instances left", i, n)
		}
	}
}

func TestMIGUUIDsChangeOnRecreate(t *testing.T) {
	m := mustNew(t, "dgx-a100-40gb", WithMIG(0, "7g.40gb"))
	before := m.GPUInstances(0)[0].ComputeInstances[0].UUID
	d := dev(t, m, 0)
	gi, _ := d.GetGpuInstanceById(0)
	ci, _ := gi.GetComputeInstanceById(0)
	ci.Destroy()
	ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	after := m.GPUInstances(0)[0].ComputeInstances[0].UUID
	if before == after {
		t.Errorf("recreated MIG device kept UUID %s", before)
	}
	// Two machines built alike have the same MIG UUIDs.
	if a, b := mustNew(t, "dgx-a100-40gb", WithMIG(0, "7g.40gb")), mustNew(t, "dgx-a100-40gb", WithMIG(0, "7g.40gb")); a.GPUInstances(0)[0].ComputeInstances[0].UUID != b.GPUInstances(0)[0].ComputeInstances[0].UUID {
		t.Error("MIG UUIDs not deterministic")
	}
}

// TestNVLinkBridges: the a30x4 GPUs answer NVLink queries as bridged A30 pairs do: four active
// links to the partner (NVLink P2P OK), nothing to the others, and no active link on an
// unbridged GPU.
func TestNVLinkBridges(t *testing.T) {
	peerOf := func(m *Machine, i int) (partner int, active int) {
		partner = -1
		for l := range 4 {
			st, ret := dev(t, m, i).GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				t.Fatalf("GPU %d link %d state: %v", i, l, ret)
			}
			if st != nvml.FEATURE_ENABLED {
				if _, ret := dev(t, m, i).GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
					t.Errorf("GPU %d inactive link %d names a far end", i, l)
				}
				continue
			}
			active++
			p, ret := dev(t, m, i).GetNvLinkRemotePciInfo(l)
			if ret != nvml.SUCCESS {
				t.Fatalf("GPU %d link %d remote: %v", i, l, ret)
			}
			for j := range 4 {
				if pj, _ := dev(t, m, j).GetPciInfo(); pj.Bus == p.Bus && pj.Domain == p.Domain {
					partner = j
				}
			}
		}
		return partner, active
	}
	tests := []struct {
		opts     []Option
		partners []int // -1: no bridge
	}{
		{nil, []int{1, 0, 3, 2}},
		{[]Option{WithNVLinkBridges([2]int{0, 2})}, []int{2, -1, 0, -1}},
		{[]Option{WithNVLinkBridges()}, []int{-1, -1, -1, -1}},
	}
	for _, tc := range tests {
		m := mustNew(t, "a30x4", tc.opts...)
		for i, want := range tc.partners {
			got, active := peerOf(m, i)
			wantActive := 4
			if want < 0 {
				wantActive = 0
			}
			if got != want || active != wantActive {
				t.Errorf("bridges %v: GPU %d partner %d with %d links, want %d with %d", tc.partners, i, got, active, want, wantActive)
			}
			for j := range 4 {
				st, _ := dev(t, m, i).GetP2PStatus(dev(t, m, j), nvml.P2P_CAPS_INDEX_NVLINK)
				if ok := st == nvml.P2P_STATUS_OK; ok != (j == want) {
					t.Errorf("bridges %v: NVLink P2P %d-%d: %v", tc.partners, i, j, st)
				}
			}
		}
	}
	for _, bad := range []struct {
		machine string
		pairs   [][2]int
	}{
		{"dgx-h100", [][2]int{{0, 1}}},
		{"a30x4", [][2]int{{0, 4}}},
		{"a30x4", [][2]int{{0, 1}, {1, 2}}},
	} {
		if _, err := New(bad.machine, WithNVLinkBridges(bad.pairs...)); err == nil {
			t.Errorf("%s with bridges %v accepted", bad.machine, bad.pairs)
		}
	}
}
