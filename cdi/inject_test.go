package cdi_test

import (
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpudra/gpudra/cdi/cditest"
)

func ptr[T any](v T) *T { return &v }

func charDev(path string, major, minor int64, mode os.FileMode) oci.LinuxDevice {
	d := oci.LinuxDevice{Path: path, Type: "c", Major: major, Minor: minor}
	if mode != 0 {
		d.FileMode = ptr(mode)
	}
	return d
}

func allow(major, minor int64) oci.LinuxDeviceCgroup {
	return oci.LinuxDeviceCgroup{Allow: true, Type: "c", Major: ptr(major), Minor: ptr(minor), Access: "rwm"}
}

// TestInjection writes every claim case's spec and injects its devices into an OCI spec with the
// CDI library's cache, exactly as a container runtime does, then checks what the container gets.
func TestInjection(t *testing.T) {
	ctl := []oci.LinuxDevice{
		charDev("/dev/nvidiactl", cditest.NvidiaMajor, cditest.NvidiactlMinor, 0o666),
		charDev("/dev/nvidia-uvm", cditest.UVMMajor, 0, 0o666),
		charDev("/dev/nvidia-uvm-tools", cditest.UVMMajor, 1, 0o666),
		charDev("/dev/nvidia-modeset", cditest.NvidiaMajor, cditest.ModesetMinor, 0o666),
	}
	ctlRules := []oci.LinuxDeviceCgroup{
		allow(cditest.NvidiaMajor, cditest.NvidiactlMinor), allow(cditest.UVMMajor, 0),
		allow(cditest.UVMMajor, 1), allow(cditest.NvidiaMajor, cditest.ModesetMinor),
	}
	driverMounts := []string{
		"/lib/firmware/nvidia/580.95.05/gsp_ga10x.bin", "/lib/firmware/nvidia/580.95.05/gsp_tu10x.bin",
		"/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-server", "/usr/bin/nvidia-debugdump",
		"/usr/bin/nvidia-persistenced", "/usr/bin/nvidia-smi",
		"/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05", "/usr/lib/x86_64-linux-gnu/libcudadebugger.so.580.95.05",
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05", "/usr/lib/x86_64-linux-gnu/libnvidia-nvvm.so.580.95.05",
		"/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.580.95.05",
	}
	baseEnv := []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=all"}
	caps := func(gpu, gi, ci int) []oci.LinuxDevice {
		g, c := cditest.GIMinor(gpu, gi), cditest.CIMinor(gpu, gi, ci)
		return []oci.LinuxDevice{
			charDev("/dev/nvidia-caps/nvidia-cap"+itoa(g), cditest.CapsMajor, g, 0),
			charDev("/dev/nvidia-caps/nvidia-cap"+itoa(c), cditest.CapsMajor, c, 0),
		}
	}

	type want struct {
		devices []oci.LinuxDevice
		rules   []oci.LinuxDeviceCgroup
		mounts  []string // destinations, sorted
		env     []string
		hooks   int
	}
	wants := map[string]want{
		"full-gpu": {
			devices: append(slices.Clone(ctl), charDev("/dev/nvidia0", cditest.NvidiaMajor, 0, 0o666)),
			rules:   append(slices.Clone(ctlRules), allow(cditest.NvidiaMajor, 0)),
			mounts:  driverMounts,
			env:     []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=void"},
		},
		"mig": {
			// The runtime replaces a node with the same path, so the second device's parent
			// node moves behind the first device's capability nodes.
			devices: slices.Concat(ctl, caps(1, 7, 0),
				[]oci.LinuxDevice{charDev("/dev/nvidia1", cditest.NvidiaMajor, 1, 0o666)}, caps(1, 2, 0)),
			rules: slices.Concat(ctlRules, []oci.LinuxDeviceCgroup{
				allow(cditest.NvidiaMajor, 1), allow(cditest.CapsMajor, cditest.GIMinor(1, 7)), allow(cditest.CapsMajor, cditest.CIMinor(1, 7, 0)),
				allow(cditest.NvidiaMajor, 1), allow(cditest.CapsMajor, cditest.GIMinor(1, 2)), allow(cditest.CapsMajor, cditest.CIMinor(1, 2, 0)),
			}),
			mounts: driverMounts,
			env:    []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=void"},
		},
		"mps": {
			devices: append(slices.Clone(ctl), charDev("/dev/nvidia2", cditest.NvidiaMajor, 2, 0o666), charDev("/dev/nvidia3", cditest.NvidiaMajor, 3, 0o666)),
			rules:   append(slices.Clone(ctlRules), allow(cditest.NvidiaMajor, 2), allow(cditest.NvidiaMajor, 3)),
			mounts:  append(slices.Clone(driverMounts), "/tmp/nvidia-mps"),
			env: []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=void", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20G"},
		},
		"time-slicing": {
			devices: append(slices.Clone(ctl), charDev("/dev/nvidia4", cditest.NvidiaMajor, 4, 0o666), charDev("/dev/nvidia5", cditest.NvidiaMajor, 5, 0o666)),
			rules:   append(slices.Clone(ctlRules), allow(cditest.NvidiaMajor, 4), allow(cditest.NvidiaMajor, 5)),
			mounts:  driverMounts,
			env:     []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=void"},
		},
		"driver-container-hooks": {
			devices: slices.Concat([]oci.LinuxDevice{
				charDev("/dev/nvidiactl", cditest.NvidiaMajor, cditest.NvidiactlMinor, 0o666),
				charDev("/dev/nvidia6", cditest.NvidiaMajor, 6, 0o666),
			}, []oci.LinuxDevice{
				charDev("/dev/nvidia-caps/nvidia-cap"+itoa(cditest.GIMinor(6, 3)), cditest.CapsMajor, cditest.GIMinor(6, 3), 0o444),
				charDev("/dev/nvidia-caps/nvidia-cap"+itoa(cditest.CIMinor(6, 3, 1)), cditest.CapsMajor, cditest.CIMinor(6, 3, 1), 0o444),
			}),
			rules: []oci.LinuxDeviceCgroup{
				allow(cditest.NvidiaMajor, cditest.NvidiactlMinor), allow(cditest.NvidiaMajor, 6),
				allow(cditest.CapsMajor, cditest.GIMinor(6, 3)), allow(cditest.CapsMajor, cditest.CIMinor(6, 3, 1)),
			},
			mounts: driverMounts,
			env:    []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=all", "GPUDRA_CLAIM=" + uidHook},
			hooks:  2,
		},
	}

	for _, tc := range claimCases() {
		t.Run(tc.name, func(t *testing.T) {
			w, ok := wants[tc.name]
			if !ok {
				t.Fatalf("no expectation for case %s", tc.name)
			}
			g, _ := generator(t, tc.layout, tc.opts...)
			cs, err := g.Generate(tc.claim)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			dir := t.TempDir()
			if _, err := writer(t, dir).Write(cs); err != nil {
				t.Fatalf("Write: %v", err)
			}
			cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			if err := cache.Refresh(); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			var ids []string
			for _, d := range tc.claim.Devices {
				ids = append(ids, cs.DeviceIDs[d.Name])
			}
			ociSpec := &oci.Spec{Process: &oci.Process{Env: slices.Clone(baseEnv)}, Linux: &oci.Linux{}}
			unresolved, err := cache.InjectDevices(ociSpec, ids...)
			if err != nil {
				t.Fatalf("InjectDevices(%v): %v (unresolved %v)", ids, err, unresolved)
			}
			if diff := cmp.Diff(w.devices, ociSpec.Linux.Devices); diff != "" {
				t.Errorf("linux.devices (-want +got):\n%s", diff)
			}
			var rules []oci.LinuxDeviceCgroup
			if ociSpec.Linux.Resources != nil {
				rules = ociSpec.Linux.Resources.Devices
			}
			if diff := cmp.Diff(w.rules, rules); diff != "" {
				t.Errorf("linux.resources.devices (-want +got):\n%s", diff)
			}
			var mounts []string
			for _, m := range ociSpec.Mounts {
				mounts = append(mounts, m.Destination)
			}
			slices.Sort(mounts)
			wantMounts := slices.Sorted(slices.Values(w.mounts))
			if diff := cmp.Diff(wantMounts, mounts); diff != "" {
				t.Errorf("mount destinations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(w.env, ociSpec.Process.Env); diff != "" {
				t.Errorf("process.env (-want +got):\n%s", diff)
			}
			hooks := 0
			if ociSpec.Hooks != nil {
				hooks = len(ociSpec.Hooks.CreateContainer)
			}
			if hooks != w.hooks {
				t.Errorf("createContainer hooks = %d, want %d", hooks, w.hooks)
			}
			for _, m := range ociSpec.Mounts {
				if m.Destination == "/tmp/nvidia-mps" && m.Source != mpsPipeHost {
					t.Errorf("MPS pipe mount source = %s, want %s", m.Source, mpsPipeHost)
				}
			}
		})
	}
}
