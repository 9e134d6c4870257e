package nvmlgpu

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

func newMachine(t testing.TB, name string, opts ...gputest.Option) *gputest.Machine {
	t.Helper()
	m, err := gputest.New(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func uuidOf(t testing.TB, m *gputest.Machine, i int) string {
	t.Helper()
	u, ret := m.Device(i).GetUUID()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return u
}

// ignoreMIGUUIDs leaves MIG UUIDs out of GPU diffs; TestEnumerateMIGUUIDs checks them.
var ignoreMIGUUIDs = cmpopts.IgnoreFields(gpu.MIGDevice{}, "UUID")

func TestEnumerateGPU(t *testing.T) {
	tests := []struct {
		machine string
		opts    []gputest.Option
		index   int
		want    gpu.GPU
	}{
		{
			machine: "l4x8", index: 5,
			want: gpu.GPU{Index: 5, Minor: 5, ProductName: "NVIDIA L4", Brand: "NVIDIA", Architecture: "Ada Lovelace",
				CudaComputeCapability: "8.9.0", MemoryBytes: 23034 << 20, Multiprocessors: 58,
				PCIBusID: "0000:ba:00.0", PCIDeviceID: 0x27B810DE, NUMANode: 1},
		},
		{
			machine: "a10gx4", index: 3,
			want: gpu.GPU{Index: 3, Minor: 3, ProductName: "NVIDIA A10G", Brand: "NVIDIA", Architecture: "Ampere",
				CudaComputeCapability: "8.6.0", MemoryBytes: 23028 << 20, Multiprocessors: 72,
				PCIBusID: "0000:00:1e.0", PCIDeviceID: 0x223710DE, NUMANode: 0},
		},
		{
			machine: "dgx-h100", index: 7,
			want: gpu.GPU{Index: 7, Minor: 7, ProductName: "NVIDIA H100 80GB HBM3", Brand: "NVIDIA", Architecture: "Hopper",
				CudaComputeCapability: "9.0.0", MemoryBytes: 81559 << 20, Multiprocessors: 132,
				PCIBusID: "0000:df:00.0", PCIDeviceID: 0x233010DE, NUMANode: 1, MIGCapable: true},
		},
		{
			machine: "gb200-nvl4", index: 2, opts: []gputest.Option{gputest.WithMIG(2)},
			want: gpu.GPU{Index: 2, Minor: 2, ProductName: "NVIDIA GB200", Brand: "NVIDIA", Architecture: "Blackwell",
				CudaComputeCapability: "10.0.0", MemoryBytes: 189471 << 20, Multiprocessors: mustModel(t, "GB200").Multiprocessors,
				PCIBusID: "0018:01:00.0", PCIDeviceID: 0x294110DE, NUMANode: 1, MIGCapable: true, MIGEnabled: true, MIGPending: true},
		},
		{
			machine: "dgx-a100-40gb", index: 1,
			opts: []gputest.Option{gputest.WithMIG(1, "1c.3g.20gb@4", "1g.5gb+me@1", "1g.10gb@2")},
			want: gpu.GPU{Index: 1, Minor: 1, ProductName: "NVIDIA A100-SXM4-40GB", Brand: "NVIDIA", Architecture: "Ampere",
				CudaComputeCapability: "8.0.0", MemoryBytes: 40960 << 20, Multiprocessors: 108,
				PCIBusID: "0000:0f:00.0", PCIDeviceID: 0x20B010DE, NUMANode: 3, MIGCapable: true, MIGEnabled: true, MIGPending: true,
				MIGDevices: []gpu.MIGDevice{
					{ParentIndex: 1, ParentMinor: 1, Profile: "1g.5gb+me", GIProfileID: 20, CIProfileID: 0, GIID: 13, CIID: 0,
						Placement: mig.Placement{Start: 1, Size: 1}, MemoryBytes: 4864 << 20, Multiprocessors: 14,
						CopyEngines: 1, Decoders: 1, JpegEngines: 1, OfaEngines: 1},
					{ParentIndex: 1, ParentMinor: 1, Profile: "1g.10gb", GIProfileID: 15, CIProfileID: 0, GIID: 5, CIID: 0,
						Placement: mig.Placement{Start: 2, Size: 2}, MemoryBytes: 9856 << 20, Multiprocessors: 14,
						CopyEngines: 1, Decoders: 1},
					{ParentIndex: 1, ParentMinor: 1, Profile: "1c.3g.20gb", GIProfileID: 9, CIProfileID: 0, GIID: 1, CIID: 0,
						Placement: mig.Placement{Start: 4, Size: 4}, MemoryBytes: 19968 << 20, Multiprocessors: 14,
						CopyEngines: 3, Decoders: 2},
				}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.machine, func(t *testing.T) {
			m := newMachine(t, tt.machine, tt.opts...)
			inv, err := Enumerate(context.Background(), m)
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.GPUs) != m.NumGPUs() || len(inv.Errors) != 0 {
				t.Fatalf("%d GPUs, %d errors; want %d, 0", len(inv.GPUs), len(inv.Errors), m.NumGPUs())
			}
			want := tt.want
			want.UUID = uuidOf(t, m, tt.index)
			for i := range want.MIGDevices {
				want.MIGDevices[i].ParentUUID = want.UUID
			}
			if diff := cmp.Diff(want, inv.GPUs[tt.index], ignoreMIGUUIDs, cmpopts.IgnoreFields(gpu.GPU{}, "MIGGeometry")); diff != "" {
				t.Errorf("GPU %d (-want +got):\n%s", tt.index, diff)
			}
		})
	}
}

// TestEnumerateReadsMIGGeometry: the geometry comes from the device, not the catalog — a fake
// whose 1g.10gb allows 2 instances of 9728 MiB (the catalog: 4 of 9856) is reported as such, with
// the two differences named — once per product, and only for MIG-capable GPUs.
func TestEnumerateReadsMIGGeometry(t *testing.T) {
	m := newMachine(t, "dgx-a100-40gb", gputest.WithMIGProfileEdit("1g.10gb", func(p *mig.GIProfile) { p.InstanceCount, p.MemoryMiB = 2, 9728 }))
	inv, err := Enumerate(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	geo := inv.GPUs[0].MIGGeometry
	if geo == nil || geo.Model == nil || geo.Err != nil {
		t.Fatalf("MIGGeometry %+v; want a model read from the device", geo)
	}
	p, ok := geo.Model.Profile("1g.10gb")
	if !ok || p.InstanceCount != 2 || p.MemoryMiB != 9728 {
		t.Errorf("device 1g.10gb: %+v; want the edited 2 instances of 9728 MiB", p)
	}
	var got []string
	for _, d := range geo.CatalogDifferences {
		got = append(got, d.Profile+"."+d.Property+": "+d.Table+" -> "+d.Live)
	}
	want := []string{"1g.10gb.memoryMiB: 9856 -> 9728", "1g.10gb.instanceCount: 4 -> 2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("catalog differences (-want +got):\n%s", diff)
	}
	for _, g := range inv.GPUs[1:] {
		if g.MIGGeometry != geo {
			t.Errorf("GPU %d: geometry read again; want the product's one value", g.Index)
		}
	}
	inv, err = Enumerate(context.Background(), m, ReadMIGGeometry(false))
	if err != nil || inv.GPUs[0].MIGGeometry != nil {
		t.Errorf("ReadMIGGeometry(false): %v, %v; want no geometry", inv.GPUs[0].MIGGeometry, err)
	}
	inv, err = Enumerate(context.Background(), newMachine(t, "l4x8"))
	if err != nil || inv.GPUs[0].MIGGeometry != nil {
		t.Errorf("L4 (no MIG): %v, %v; want no geometry", inv.GPUs[0].MIGGeometry, err)
	}
}

func mustModel(t testing.TB, name string) *mig.Model {
	t.Helper()
	m, err := mig.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEnumerateMIGUUIDs(t *testing.T) {
	m := newMachine(t, "dgx-a100-40gb", gputest.WithMIGAll("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"))
	inv, err := Enumerate(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for i, g := range inv.GPUs {
		for _, d := range g.MIGDevices {
			got = append(got, d.UUID)
		}
		for _, gi := range m.GPUInstances(i) {
			for _, ci := range gi.ComputeInstances {
				want = append(want, ci.UUID)
			}
		}
	}
	if len(got) != 32 {
		t.Errorf("%d MIG devices, want 32", len(got))
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("MIG UUIDs (-want +got):\n%s", diff)
	}
}

func TestEnumerateVersions(t *testing.T) {
	tests := []struct {
		driver        string
		cuda          int
		wantDriver    string
		wantCUDA      string
		wantErrSubstr string
	}{
		{"580.126.09", 13000, "580.126.9", "13.0.0", ""},
		{"550.54.15", 12040, "550.54.15", "12.4.0", ""},
		{"535.104", 12020, "535.104.0", "12.2.0", ""},
		{"580.x.1", 13000, "", "", `part "x" is not a number`},
	}
	for _, tt := range tests {
		m := newMachine(t, "l4x8", gputest.WithDriverVersion(tt.driver), gputest.WithCUDADriverVersion(tt.cuda))
		inv, err := Enumerate(context.Background(), m)
		if tt.wantErrSubstr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstr) {
				t.Errorf("%s: error %v, want %q", tt.driver, err, tt.wantErrSubstr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if inv.DriverVersion != tt.wantDriver || inv.CUDADriverVersion != tt.wantCUDA {
			t.Errorf("%s/%d: %s %s, want %s %s", tt.driver, tt.cuda, inv.DriverVersion, inv.CUDADriverVersion, tt.wantDriver, tt.wantCUDA)
		}
	}
}

func TestEnumerateFailures(t *testing.T) {
	tests := []struct {
		name    string
		machine string
		opts    []gputest.Option
		want    *gpu.DeviceError
		// uuidRead says the GPU's UUID was read before the failure, so the error names it.
		uuidRead bool
	}{
		{"GetUUID of GPU 2", "dgx-h100", []gputest.Option{gputest.WithFault("GetUUID", 3, nvml.ERROR_GPU_IS_LOST)},
			&gpu.DeviceError{Index: 2, MIGIndex: -1, Op: "GetUUID", Return: nvml.ERROR_GPU_IS_LOST}, false},
		{"handle of GPU 0", "l4x8", []gputest.Option{gputest.WithFault("DeviceGetHandleByIndex", 1, nvml.ERROR_UNKNOWN)},
			&gpu.DeviceError{Index: 0, MIGIndex: -1, Op: "DeviceGetHandleByIndex", Return: nvml.ERROR_UNKNOWN}, false},
		{"MIG mode of GPU 1", "a30x4", []gputest.Option{gputest.WithFault("GetMigMode", 2, nvml.ERROR_NO_PERMISSION)},
			&gpu.DeviceError{Index: 1, MIGIndex: -1, Op: "GetMigMode", Return: nvml.ERROR_NO_PERMISSION}, true},
		{"second MIG device of GPU 0", "dgx-a100-40gb",
			[]gputest.Option{gputest.WithMIG(0, "3g.20gb", "3g.20gb"), gputest.WithFault("MIGDeviceHandle.GetUUID", 2, nvml.ERROR_GPU_IS_LOST)},
			&gpu.DeviceError{Index: 0, MIGIndex: 1, Op: "GetUUID", Return: nvml.ERROR_GPU_IS_LOST}, true},
		{"GPU instance of GPU 0", "dgx-a100-40gb",
			[]gputest.Option{gputest.WithMIG(0, "7g.40gb"), gputest.WithFault("GetGpuInstanceById", 1, nvml.ERROR_UNKNOWN)},
			&gpu.DeviceError{Index: 0, MIGIndex: 0, Op: "GetGpuInstanceById", Return: nvml.ERROR_UNKNOWN}, true},
		{"MIG devices of GPU 0 without handles", "dgx-a100-40gb",
			[]gputest.Option{gputest.WithMIG(0, "3g.20gb"), gputest.WithFaultAfter("GetMaxMigDeviceCount", 0, nvml.ERROR_NOT_SUPPORTED)},
			&gpu.DeviceError{Index: 0, MIGIndex: -1, Op: "GetMaxMigDeviceCount", Return: nvml.ERROR_NOT_SUPPORTED}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.uuidRead {
				tt.want.UUID, _ = newMachine(t, tt.machine).Device(tt.want.Index).GetUUID()
			}
			tt.want.Message = tt.want.Error()
			// Fail (the default).
			inv, err := Enumerate(context.Background(), newMachine(t, tt.machine, tt.opts...))
			var de *gpu.DeviceError
			if inv != nil || !errors.As(err, &de) {
				t.Fatalf("Enumerate = %v, %v; want a *DeviceError", inv, err)
			}
			if diff := cmp.Diff(tt.want, de); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if !errors.Is(err, tt.want.Return) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.want.Return)
			}
			// Skip.
			m := newMachine(t, tt.machine, tt.opts...)
			inv, err = Enumerate(context.Background(), m, SkipFailedGPUs(true))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]*gpu.DeviceError{tt.want}, inv.Errors); diff != "" {
				t.Errorf("Inventory.Errors (-want +got):\n%s", diff)
			}
			if len(inv.GPUs) != m.NumGPUs()-1 {
				t.Errorf("%d GPUs, want %d", len(inv.GPUs), m.NumGPUs()-1)
			}
			for _, g := range inv.GPUs {
				if g.Index == tt.want.Index {
					t.Errorf("failed GPU %d was not skipped", g.Index)
				}
			}
		})
	}
	if _, err := Enumerate(context.Background(), newMachine(t, "l4x8", gputest.WithFault("DeviceGetCount", 1, nvml.ERROR_UNKNOWN)), SkipFailedGPUs(true)); err == nil || !strings.Contains(err.Error(), "DeviceGetCount") {
		t.Errorf("DeviceGetCount failure: %v", err)
	}
}

// TestEnumerateReadsMIGModeOnce: enumeration reads each GPU's MIG mode once and lists the
// instances of a GPU in MIG mode without asking again, so a GPU whose second answer would be
// NOT_SUPPORTED (found by FuzzEnumerateFaults) is not published as in MIG mode with no MIG
// devices: the fault hits the next GPU's read, which is then served whole.
func TestEnumerateReadsMIGModeOnce(t *testing.T) {
	m := newMachine(t, "a30x4", gputest.WithMIG(0, "2g.12gb", "2g.12gb"), gputest.WithFault("GetMigMode", 2, nvml.ERROR_NOT_SUPPORTED))
	inv, err := Enumerate(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	type mode struct {
		Capable, Enabled bool
		MIGDevices       []string
	}
	var got []mode
	for _, g := range inv.GPUs {
		md := mode{Capable: g.MIGCapable, Enabled: g.MIGEnabled}
		for _, d := range g.MIGDevices {
			md.MIGDevices = append(md.MIGDevices, d.Profile)
		}
		got = append(got, md)
	}
	want := []mode{{true, true, []string{"2g.12gb", "2g.12gb"}}, {}, {Capable: true}, {Capable: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MIG state of the GPUs (-want +got):\n%s", diff)
	}
	if n := m.Calls("GetMigMode"); n != m.NumGPUs() {
		t.Errorf("GetMigMode called %d times for %d GPUs", n, m.NumGPUs())
	}
}

func TestEnumerateCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Enumerate(ctx, newMachine(t, "l4x8")); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

func TestProfileNamesWithoutCatalog(t *testing.T) {
	m := newMachine(t, "dgx-a100-40gb", gputest.WithMIG(0, "1g.5gb", "1g.5gb+me", "2g.10gb", "1c.3g.20gb"))
	noCatalog := WithCatalog(func(string) (*mig.Model, error) { return nil, errors.New("no catalog") })
	inv, err := Enumerate(context.Background(), m, noCatalog)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range inv.GPUs[0].MIGDevices {
		got = append(got, d.Profile)
	}
	if diff := cmp.Diff([]string{"1g.5gb", "1g.5gb+me", "2g.10gb", "1c.3g.20gb"}, got); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
}

func TestSession(t *testing.T) {
	m := newMachine(t, "l4x8")
	s, err := Open(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enumerate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if m.Calls("Init") != 1 || m.Calls("Shutdown") != 1 {
		t.Errorf("Init %d, Shutdown %d; want 1, 1", m.Calls("Init"), m.Calls("Shutdown"))
	}
	if _, err := s.Enumerate(context.Background()); err == nil {
		t.Error("Enumerate after Close succeeded")
	}
	if _, err := Open(newMachine(t, "l4x8", gputest.WithFault("Init", 1, nvml.ERROR_DRIVER_NOT_LOADED))); !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		t.Errorf("Open with failing Init: %v", err)
	}
}

func TestOpenRealWithoutLibrary(t *testing.T) {
	_, err := OpenReal(WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))
	if !errors.Is(err, ErrNVMLNotFound) || !strings.Contains(err.Error(), "/nonexistent/libnvidia-ml.so.1") {
		t.Errorf("OpenReal(missing path): %v", err)
	}
	_, err = OpenReal(WithLibraryPath("libnvidia-ml-does-not-exist.so.1"))
	if !errors.Is(err, ErrNVMLNotFound) {
		t.Errorf("OpenReal(missing name): %v", err)
	}
}

func TestNormalizers(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"580.126.09", "580.126.9"}, {"550.54.15", "550.54.15"}, {"470", "470.0.0"}, {" 535.104.05 ", "535.104.5"},
	} {
		if got, err := gpu.NormalizeDriverVersion(tt.in); err != nil || got != tt.want {
			t.Errorf("NormalizeDriverVersion(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "1.2.3.4", "580..1", "-1.0", "v580"} {
		if got, err := gpu.NormalizeDriverVersion(bad); err == nil {
			t.Errorf("NormalizeDriverVersion(%q) = %q, want an error", bad, got)
		}
	}
	for _, tt := range []struct {
		in   int
		want string
	}{{13000, "13.0.0"}, {12040, "12.4.0"}, {11080, "11.8.0"}, {12090, "12.9.0"}} {
		if got, _ := gpu.CUDADriverVersion(tt.in); got != tt.want {
			t.Errorf("CUDADriverVersion(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if _, err := gpu.CUDADriverVersion(0); err == nil {
		t.Error("CUDADriverVersion(0) succeeded")
	}
	for _, tt := range []struct{ in, want string }{
		{"00000000:B7:00.0", "0000:b7:00.0"}, {"0000:07:00.0", "0000:07:00.0"}, {"00000019:01:00.0", "0019:01:00.0"},
	} {
		if got, err := gpu.CanonicalPCIBusID(tt.in); err != nil || got != tt.want {
			t.Errorf("CanonicalPCIBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "07:00.0", "0000:07:00", "0000:100:00.0"} {
		if got, err := gpu.CanonicalPCIBusID(bad); err == nil {
			t.Errorf("CanonicalPCIBusID(%q) = %q, want an error", bad, got)
		}
	}
	if BrandName(nvml.BRAND_TESLA) != "Tesla" || BrandName(nvml.BRAND_NVIDIA) != "NVIDIA" || BrandName(99) != "Unknown" {
		t.Error("BrandName")
	}
	if nvmlmig.ArchitectureName(nvml.DEVICE_ARCH_KEPLER) != "Kepler" || nvmlmig.ArchitectureName(nvml.DEVICE_ARCH_BLACKWELL) != "Blackwell" || nvmlmig.ArchitectureName(nvml.DEVICE_ARCH_UNKNOWN) != "Unknown" {
		t.Error("ArchitectureName")
	}
}

func BenchmarkEnumerate(b *testing.B) {
	for _, bc := range []struct {
		name    string
		machine string
		opts    []gputest.Option
	}{
		{"dgx-a100-40gb-all-balanced", "dgx-a100-40gb", []gputest.Option{gputest.WithMIGAll("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb")}},
		{"dgx-h100", "dgx-h100", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := newMachine(b, bc.machine, bc.opts...)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Enumerate(context.Background(), m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
