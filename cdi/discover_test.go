package cdi_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
)

func TestDiscover(t *testing.T) {
	root := newRoot(t, cditest.Layout{GPUs: 3, Binaries: []string{cdi.NvidiaSMI, cdi.MPSControl}, Firmware: []string{}})
	// A library of another driver version and a lookalike are not this driver's.
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "/usr/lib64/libnvidia-ml.so.580.95.05", "/usr/lib64/notalib.so.580.95.05"} {
		if err := root.WriteFile(p, "x"); err != nil {
			t.Fatal(err)
		}
	}
	inst, err := cdi.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	files := func(paths ...string) []cdi.File {
		var fs []cdi.File
		for _, p := range paths {
			fs = append(fs, cdi.File{Path: p, HostPath: p})
		}
		return fs
	}
	lib := "/usr/lib/x86_64-linux-gnu/"
	want := &cdi.Installation{
		DriverVersion: "580.95.05",
		// /usr/lib64 comes first in the search path, so its libnvidia-ml wins.
		Libraries: files(lib+"libcuda.so.580.95.05", lib+"libcudadebugger.so.580.95.05", lib+"libnvidia-nvvm.so.580.95.05",
			lib+"libnvidia-ptxjitcompiler.so.580.95.05", "/usr/lib64/libnvidia-ml.so.580.95.05"),
		Binaries: files("/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-control"),
	}
	if diff := cmp.Diff(want, inst, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "root" }, cmp.Ignore()),
		cmp.AllowUnexported(cdi.Installation{})); diff != "" {
		t.Errorf("Discover (-want +got):\n%s", diff)
	}
	if f, ok := inst.Binary(cdi.MPSControl); !ok || f.Path != "/usr/bin/nvidia-cuda-mps-control" {
		t.Errorf("Binary(%s) = %v, %v", cdi.MPSControl, f, ok)
	}
	if _, ok := inst.Binary(cdi.MPSServer); ok {
		t.Errorf("Binary(%s) found a binary that is not there", cdi.MPSServer)
	}
	if diff := cmp.Diff([]string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64"}, inst.LibraryDirs()); diff != "" {
		t.Errorf("LibraryDirs (-want +got):\n%s", diff)
	}
	minors, err := inst.GPUDeviceNodes()
	if err != nil || !cmp.Equal(minors, []int{0, 1, 2}) {
		t.Errorf("GPUDeviceNodes = %v, %v; want [0 1 2]", minors, err)
	}
	caps, err := inst.MIGCaps()
	if err != nil {
		t.Fatal(err)
	}
	if caps.Major != cditest.CapsMajor {
		t.Errorf("MIGCaps major = %d, want %d", caps.Major, cditest.CapsMajor)
	}
	if m, ok, err := caps.Minor(cdi.CIKey(2, 14, 7)); err != nil || !ok || m != 3+270+126+8 {
		t.Errorf("Minor(gpu2/gi14/ci7) = %d, %v, %v; want %d", m, ok, err, 3+270+126+8)
	}
}

func TestDiscoverVersion(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		opts          []cdi.DiscoverOption
		want, err     string
	}{
		{name: "open module", content: "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (x@y)  date\n", want: "580.95.05"},
		{name: "proprietary", content: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 2025\n", want: "580.95.05"},
		{name: "option wins", content: "garbage", opts: []cdi.DiscoverOption{cdi.WithDriverVersion("580.95.05")}, want: "580.95.05"},
		{name: "garbage", content: "NVRM: something else\n", err: `no "Kernel Module <version>"`},
		{name: "other version", content: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  date\n", err: "libcuda.so.550.54.15 not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t, cditest.Layout{GPUs: 1})
			if err := root.WriteFile(cdi.DriverVersionPath, tc.content); err != nil {
				t.Fatal(err)
			}
			inst, err := cdi.Discover(root, tc.opts...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Discover = %v, want error containing %q", err, tc.err)
				}
				return
			}
			if err != nil || inst.DriverVersion != tc.want {
				t.Fatalf("Discover = %v, %v; want version %s", inst, err, tc.want)
			}
		})
	}
	root := newRoot(t, cditest.Layout{GPUs: 1})
	if err := root.RemoveFile(cdi.DriverVersionPath); err != nil {
		t.Fatal(err)
	}
	if _, err := cdi.Discover(root); err == nil || !strings.Contains(err.Error(), "kernel module loaded") {
		t.Errorf("Discover without %s = %v", cdi.DriverVersionPath, err)
	}
}

func TestGenerateErrors(t *testing.T) {
	gpu0 := []cdi.Device{{Name: "gpu-0", GPUMinor: 0}}
	for _, tc := range []struct {
		name   string
		layout cditest.Layout
		breaks func(*cditest.DriverRoot) error
		claim  cdi.ClaimDevices
		want   string
	}{
		{name: "no devices", claim: cdi.ClaimDevices{ClaimUID: uidGPU}, want: "claim " + uidGPU + ": no devices"},
		{name: "bad device name", claim: cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "GPU_0"}}}, want: `device name "GPU_0": must be a DNS label`},
		{name: "duplicate device", claim: cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "gpu-0"}, {Name: "gpu-0", GPUMinor: 1}}}, want: `device "gpu-0": listed twice`},
		{
			name:  "missing GPU node",
			claim: cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "gpu-9", GPUMinor: 9, UUID: "GPU-x"}}},
			want:  `claim ` + uidGPU + ` device "gpu-9" (GPU-x): GPU device node for minor 9: stat`,
		},
		{name: "minor out of range", claim: cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "gpu-x", GPUMinor: 255}}}, want: "must be in [0, 254]"},
		{
			name: "missing nvidiactl", breaks: func(r *cditest.DriverRoot) error { return r.RemoveDeviceNode(cdi.NvidiaCtlPath) },
			claim: cdi.ClaimDevices{ClaimUID: uidGPU, Devices: gpu0}, want: "control device node: stat",
		},
		{
			name: "no MIG support", layout: cditest.Layout{NoMIG: true},
			claim: cdi.ClaimDevices{ClaimUID: uidMIG, Devices: []cdi.Device{{Name: "mig", MIG: &cdi.MIGInstanceIDs{GI: 1}}}},
			want:  `device "mig": MIG capabilities: /proc/devices: no character device "nvidia-caps"`,
		},
		{
			name: "mig-minors missing", breaks: func(r *cditest.DriverRoot) error { return r.RemoveFile(cdi.MIGMinorsPath) },
			claim: cdi.ClaimDevices{ClaimUID: uidMIG, Devices: []cdi.Device{{Name: "mig", MIG: &cdi.MIGInstanceIDs{GI: 1}}}},
			want:  "MIG capabilities: open",
		},
		{
			name: "mig-minors corrupt", breaks: func(r *cditest.DriverRoot) error { return r.WriteFile(cdi.MIGMinorsPath, "gpu0/gi0/access x\n") },
			claim: cdi.ClaimDevices{ClaimUID: uidMIG, Devices: []cdi.Device{{Name: "mig", MIG: &cdi.MIGInstanceIDs{GI: 0}}}},
			want:  `line 1: "gpu0/gi0/access x": minor must be a non-negative integer`,
		},
		{
			name:  "unknown GI",
			claim: cdi.ClaimDevices{ClaimUID: uidMIG, Devices: []cdi.Device{{Name: "mig", GPUMinor: 1, MIG: &cdi.MIGInstanceIDs{GI: 15}}}},
			want:  `MIG capability "gpu1/gi15/access" not in /proc/driver/nvidia-caps/mig-minors (GPU minor 1, GI 15, CI 0)`,
		},
		{
			name:  "negative CI",
			claim: cdi.ClaimDevices{ClaimUID: uidMIG, Devices: []cdi.Device{{Name: "mig", MIG: &cdi.MIGInstanceIDs{CI: -1}}}},
			want:  "MIG GI 0 and CI -1 must not be negative",
		},
		{
			name: "conflicting device edits",
			claim: cdi.ClaimDevices{ClaimUID: uidMPS, Devices: []cdi.Device{{Name: "gpu-0", Edits: &specs.ContainerEdits{
				DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 1, Minor: 3}},
			}}}},
			want: `device "gpu-0": device edits: device node /dev/nvidia0: given twice with different content`,
		},
		{
			name: "claim edits override void",
			claim: cdi.ClaimDevices{ClaimUID: uidMPS, Devices: gpu0, Edits: &specs.ContainerEdits{
				Env: []string{"NVIDIA_VISIBLE_DEVICES=all"},
			}},
			want: `claim edits: env NVIDIA_VISIBLE_DEVICES: set to both "NVIDIA_VISIBLE_DEVICES=void" and "NVIDIA_VISIBLE_DEVICES=all"`,
		},
		{
			name: "invalid edits from sharing",
			claim: cdi.ClaimDevices{ClaimUID: uidMPS, Devices: []cdi.Device{{Name: "gpu-0", Edits: &specs.ContainerEdits{
				Mounts: []*specs.Mount{{ContainerPath: "/tmp/nvidia-mps"}},
			}}}},
			want: "generated spec is invalid: device \"" + uidMPS + "-gpu-0\": invalid mount, empty host path",
		},
		{
			name: "bad hook name from sharing",
			claim: cdi.ClaimDevices{ClaimUID: uidMPS, Devices: gpu0, Edits: &specs.ContainerEdits{
				Hooks: []*specs.Hook{{HookName: "whenever", Path: "/bin/true"}},
			}},
			want: `generated spec is invalid: spec containerEdits: invalid hook name "whenever"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.layout.GPUs == 0 {
				tc.layout.GPUs = 2
			}
			g, root := generator(t, tc.layout)
			if tc.breaks != nil {
				if err := tc.breaks(root); err != nil {
					t.Fatal(err)
				}
			}
			cs, err := g.Generate(tc.claim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Generate = %v, %v\nwant error containing %q", cs, err, tc.want)
			}
		})
	}
}

// TestGenerateSeesLateNodes checks that device nodes are read per call: a node that appears after
// the generator was built is used, and one that disappears fails the claim.
func TestGenerateSeesLateNodes(t *testing.T) {
	g, root := generator(t, cditest.Layout{GPUs: 1, NoUVM: true})
	if err := root.SetDeviceNode(cdi.NvidiaUVMPath, cdi.NodeInfo{Type: "c", Major: 511, Minor: 0}); err != nil {
		t.Fatal(err)
	}
	cs, err := g.Generate(cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "gpu-0"}}})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, n := range cs.Spec.ContainerEdits.DeviceNodes {
		paths = append(paths, n.Path)
	}
	if diff := cmp.Diff([]string{cdi.NvidiaCtlPath, cdi.NvidiaUVMPath, cdi.NvidiaModesetPath}, paths); diff != "" {
		t.Errorf("control nodes (-want +got):\n%s", diff)
	}
	if err := root.RemoveDeviceNode("/dev/nvidia0"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Generate(cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "gpu-0"}}}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Generate without /dev/nvidia0 = %v, want fs.ErrNotExist", err)
	}
}

func TestGeneratorOptions(t *testing.T) {
	inst, err := cdi.Discover(newRoot(t, cditest.Layout{GPUs: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []cdi.GeneratorOption
		want string
	}{
		{"relative hook", []cdi.GeneratorOption{cdi.WithHooks(cdi.Hooks{Path: "nvidia-cdi-hook"})}, `hook path "nvidia-cdi-hook" must be an absolute host path`},
		{"relative ldconfig", []cdi.GeneratorOption{cdi.WithHooks(cdi.Hooks{Path: "/usr/bin/nvidia-cdi-hook", LdconfigPath: "ldconfig"})}, `ldconfig path "ldconfig" must be absolute`},
		{"bad vendor", []cdi.GeneratorOption{cdi.WithKind("-bad", "claim")}, `CDI vendor "-bad"`},
		{"bad class", []cdi.GeneratorOption{cdi.WithKind("example.com", "a/b")}, `CDI class "a/b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := cdi.NewGenerator(inst, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewGenerator = %v, want error containing %q", err, tc.want)
			}
		})
	}
	if _, err := cdi.NewGenerator(nil); err == nil {
		t.Error("NewGenerator(nil) succeeded")
	}

	g, err := cdi.NewGenerator(inst, cdi.WithKind("example.com", "gpu"), cdi.WithoutDriverFiles(),
		cdi.WithHooks(cdi.Hooks{Path: "/usr/bin/nvidia-cdi-hook", UpdateLdcache: true}))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := g.Generate(cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "gpu-0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if id := cs.DeviceIDs["gpu-0"]; id != "example.com/gpu="+uidGPU+"-gpu-0" {
		t.Errorf("device ID = %s", id)
	}
	if id, err := g.DeviceID(uidGPU, "gpu-0"); err != nil || id != cs.DeviceIDs["gpu-0"] {
		t.Errorf("DeviceID = %s, %v; want %s", id, err, cs.DeviceIDs["gpu-0"])
	}
	if n := len(cs.Spec.ContainerEdits.Mounts) + len(cs.Spec.ContainerEdits.Hooks); n != 0 {
		t.Errorf("WithoutDriverFiles still gives %d mounts and hooks", n)
	}
}

func TestHostRoot(t *testing.T) {
	driver := t.TempDir()
	r, err := cdi.NewHostRoot(driver, cdi.WithDevRoot("/"), cdi.WithHostDriverRoot("/run/nvidia/driver"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, resolve, host string }{
		{"/usr/bin/nvidia-smi", filepath.Join(driver, "usr/bin/nvidia-smi"), "/run/nvidia/driver/usr/bin/nvidia-smi"},
		{"/dev/nvidia0", "/dev/nvidia0", "/dev/nvidia0"},
		{"/proc/devices", "/proc/devices", "/run/nvidia/driver/proc/devices"},
		{"/../../etc/shadow", filepath.Join(driver, "etc/shadow"), "/run/nvidia/driver/etc/shadow"},
		{"/devices/x", filepath.Join(driver, "devices/x"), "/run/nvidia/driver/devices/x"},
	} {
		if got := r.Resolve(tc.path); got != tc.resolve {
			t.Errorf("Resolve(%s) = %s, want %s", tc.path, got, tc.resolve)
		}
		if got := r.HostPath(tc.path); got != tc.host {
			t.Errorf("HostPath(%s) = %s, want %s", tc.path, got, tc.host)
		}
	}

	// Where /proc is read: the default, below a proc root, or a directory standing for /proc.
	for _, tc := range []struct {
		name string
		opts []cdi.HostRootOption
		want string
	}{
		{"default", nil, "/proc/driver/nvidia/version"},
		{"proc root", []cdi.HostRootOption{cdi.WithProcRoot(driver)}, filepath.Join(driver, "proc/driver/nvidia/version")},
		{"proc dir", []cdi.HostRootOption{cdi.WithProcDir("/host/proc/")}, "/host/proc/driver/nvidia/version"},
		{"proc dir not named proc", []cdi.HostRootOption{cdi.WithProcDir("/host-proc")}, "/host-proc/driver/nvidia/version"},
		{"proc dir wins", []cdi.HostRootOption{cdi.WithProcDir("/host-proc"), cdi.WithProcRoot(driver)}, "/host-proc/driver/nvidia/version"},
	} {
		pr, err := cdi.NewHostRoot(driver, tc.opts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := pr.Resolve("/proc/driver/nvidia/version"); got != tc.want {
			t.Errorf("%s: /proc/driver/nvidia/version resolves to %s, want %s", tc.name, got, tc.want)
		}
	}

	host, err := cdi.NewHostRoot("/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/dev/null"); err == nil {
		info, err := host.DeviceNode("/dev/null")
		if err != nil || info.Type != "c" || info.Major != 1 || info.Minor != 3 {
			t.Errorf("DeviceNode(/dev/null) = %+v, %v; want c 1:3", info, err)
		}
	}
	if _, err := host.DeviceNode("/proc/devices"); err == nil || !strings.Contains(err.Error(), "not a character or block device") {
		t.Errorf("DeviceNode of a regular file = %v", err)
	}
	if _, err := host.DeviceNode("/dev/nvidia-no-such-node"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("DeviceNode of a missing node = %v, want fs.ErrNotExist", err)
	}

	for _, tc := range []struct {
		root string
		opts []cdi.HostRootOption
		want string
	}{
		{"relative", nil, `driver root "relative": must be an absolute path`},
		{driver, []cdi.HostRootOption{cdi.WithHostDevRoot("dev")}, `host dev root "dev"`},
		{driver, []cdi.HostRootOption{cdi.WithProcDir("proc")}, `proc dir "proc": must be an absolute path`},
		{driver, []cdi.HostRootOption{cdi.WithProcRoot("host")}, `proc root "host": must be an absolute path`},
		{filepath.Join(driver, "missing"), nil, "driver root: stat"},
		{"/proc/devices", nil, "not a directory"},
	} {
		if _, err := cdi.NewHostRoot(tc.root, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewHostRoot(%s) = %v, want error containing %q", tc.root, err, tc.want)
		}
	}
}

func TestDiscoverSearchPaths(t *testing.T) {
	root := newRoot(t, cditest.Layout{GPUs: 1, LibDir: "/opt/nvidia/lib", Firmware: []string{}})
	if _, err := cdi.Discover(root); err == nil || !strings.Contains(err.Error(), "libcuda.so.580.95.05 not found in library search paths") {
		t.Fatalf("Discover with the driver outside the default paths = %v", err)
	}
	if err := root.WriteFile("/opt/nvidia/bin/nvidia-smi", "x"); err != nil {
		t.Fatal(err)
	}
	inst, err := cdi.Discover(root, cdi.WithLibrarySearchPaths("/nonexistent", "/opt/nvidia/lib"),
		cdi.WithBinarySearchPaths("/opt/nvidia/bin", "/usr/bin"), cdi.WithBinaries(cdi.NvidiaSMI, cdi.MPSServer))
	if err != nil {
		t.Fatal(err)
	}
	var bins []string
	for _, b := range inst.Binaries {
		bins = append(bins, b.Path)
	}
	if diff := cmp.Diff([]string{"/opt/nvidia/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-server"}, bins); diff != "" {
		t.Errorf("binaries (-want +got):\n%s", diff)
	}
	if len(inst.Libraries) != len(cditest.DefaultLibraries()) || inst.Root() != cdi.DriverRoot(root) {
		t.Errorf("libraries %v, root %v", inst.Libraries, inst.Root())
	}
}

// TestGenerateSameDeviceTwice: consumable capacity lets one claim get one device for two
// requests. The spec has one CDI device for it, with the edits of both entries, and both
// entries map to the same device ID.
func TestGenerateSameDeviceTwice(t *testing.T) {
	g, _ := generator(t, cditest.Layout{GPUs: 2})
	env := func(e ...string) *specs.ContainerEdits { return &specs.ContainerEdits{Env: e} }
	spec, err := g.Generate(cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{
		{Name: "gpu-1", GPUMinor: 1, Edits: env("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps")},
		{Name: "gpu-1", GPUMinor: 1, Edits: env("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "EXTRA=1")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Spec.Devices) != 1 {
		t.Fatalf("%d CDI devices, want 1", len(spec.Spec.Devices))
	}
	if diff := cmp.Diff([]string{"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "EXTRA=1"}, spec.Spec.Devices[0].ContainerEdits.Env); diff != "" {
		t.Errorf("merged env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"gpu-1": "k8s.gpu.nvidia.com/claim=" + uidGPU + "-gpu-1"}, spec.DeviceIDs); diff != "" {
		t.Errorf("device IDs (-want +got):\n%s", diff)
	}
	// Conflicting edits for the one device are an error.
	_, err = g.Generate(cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{
		{Name: "gpu-1", GPUMinor: 1, Edits: env("A=1")}, {Name: "gpu-1", GPUMinor: 1, Edits: env("A=2")},
	}})
	if err == nil || !strings.Contains(err.Error(), `device "gpu-1": listed twice: device edits`) {
		t.Errorf("conflicting edits: %v", err)
	}
}
