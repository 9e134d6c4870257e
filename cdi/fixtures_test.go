package cdi_test

import (
	"strconv"
	"testing"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"tags.cncf.io/container-device-interface/specs-go"
)

const (
	uidGPU  = "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01"
	uidMIG  = "1c8b5d5f-8b9f-4a1c-8b63-7d2e3f4a5b02"
	uidMPS  = "2d9c6e6a-9cae-4b2d-9c74-8e3f4a5b6c03"
	uidTS   = "3eadf7fb-adbf-4c3e-ad85-9f4a5b6c7d04"
	uidHook = "4fbe08ac-becf-4d4f-be96-a05b6c7d8e05"

	mpsPipeHost = "/var/lib/kubelet/plugins/gpu.nvidia.com/mps/2d9c6e6a-abcde/pipe"
)

// mpsEdits are the edits the sharing package produces for an MPS device: the client
// environment and the pipe directory of the claim's control daemon.
func mpsEdits(threads, memLimit string) *specs.ContainerEdits {
	return &specs.ContainerEdits{
		Env: []string{
			"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + threads,
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + memLimit,
		},
		Mounts: []*specs.Mount{{
			HostPath: mpsPipeHost, ContainerPath: "/tmp/nvidia-mps",
			Options: []string{"rw", "nosuid", "nodev", "bind"},
		}},
	}
}

type claimCase struct {
	name   string
	layout cditest.Layout
	opts   []cdi.GeneratorOption
	claim  cdi.ClaimDevices
}

func claimCases() []claimCase {
	return []claimCase{
		{
			name: "full-gpu",
			claim: cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{
				{Name: "gpu-0", GPUMinor: 0, UUID: "GPU-4d8f1a2b-0000-0000-0000-000000000000"},
			}},
		},
		{
			name: "mig",
			claim: cdi.ClaimDevices{ClaimUID: uidMIG, Devices: []cdi.Device{
				{Name: "gpu-1-mig-1g5gb-19-0", GPUMinor: 1, UUID: "MIG-5e9a2b3c-0000-0000-0000-000000000000", MIG: &cdi.MIGInstanceIDs{GI: 7, CI: 0}},
				{Name: "gpu-1-mig-3g20gb-9-4", GPUMinor: 1, UUID: "MIG-6fab3c4d-0000-0000-0000-000000000000", MIG: &cdi.MIGInstanceIDs{GI: 2, CI: 0}},
			}},
		},
		{
			name: "mps",
			claim: cdi.ClaimDevices{ClaimUID: uidMPS, Devices: []cdi.Device{
				{Name: "gpu-2", GPUMinor: 2, Edits: mpsEdits("50", "0=20G")},
				{Name: "gpu-3", GPUMinor: 3, Edits: mpsEdits("50", "0=20G")},
			}},
		},
		{
			// Time-slicing is a host setting; the container only gets the devices.
			name: "time-slicing",
			claim: cdi.ClaimDevices{ClaimUID: uidTS, Devices: []cdi.Device{
				{Name: "gpu-4", GPUMinor: 4},
				{Name: "gpu-5", GPUMinor: 5, Edits: &specs.ContainerEdits{}},
			}},
		},
		{
			// The GPU operator's driver container: files below /run/nvidia/driver on the host, no
			// UVM and modeset nodes yet, hooks through nvidia-ctk, no void env.
			name:   "driver-container-hooks",
			layout: cditest.Layout{HostDriverRoot: "/run/nvidia/driver", NoUVM: true, NoModeset: true, CapsNodes: true},
			opts: []cdi.GeneratorOption{
				cdi.WithHooks(cdi.Hooks{Path: "/usr/local/nvidia/toolkit/nvidia-ctk", CreateSymlinks: true, UpdateLdcache: true, LdconfigPath: "@/sbin/ldconfig"}),
				cdi.WithVisibleDevicesVoid(false),
			},
			claim: cdi.ClaimDevices{ClaimUID: uidHook, Devices: []cdi.Device{
				{Name: "gpu-6-mig-2g10gb-14-0", GPUMinor: 6, MIG: &cdi.MIGInstanceIDs{GI: 3, CI: 1}},
			}, Edits: &specs.ContainerEdits{Env: []string{"GPUDRA_CLAIM=" + uidHook}}},
		},
	}
}

// generator builds a Generator on a fresh fake root.
func generator(t testing.TB, layout cditest.Layout, opts ...cdi.GeneratorOption) (*cdi.Generator, *cditest.DriverRoot) {
	t.Helper()
	root := newRoot(t, layout)
	inst, err := cdi.Discover(root)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	g, err := cdi.NewGenerator(inst, opts...)
	if err != nil {
		t.Fatalf("NewGenerator: %v", err)
	}
	return g, root
}

func writer(t testing.TB, dir string) *cdi.Writer {
	t.Helper()
	w, err := cdi.NewWriter(cdi.WithSpecDir(dir))
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	return w
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// newRoot lays out a fake driver root in a temporary directory of t.
func newRoot(t testing.TB, l cditest.Layout) *cditest.DriverRoot {
	t.Helper()
	r, err := cditest.Build(t.TempDir(), l)
	if err != nil {
		t.Fatalf("fake driver root: %v", err)
	}
	return r
}
