package gpudra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/simulate"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

const testNode = "node-1"

// inventory enumerates a fake machine.
func inventory(t testing.TB, machine string, opts ...gputest.Option) *gpu.Inventory {
	t.Helper()
	inv, _ := inventoryAndTopology(t, machine, opts...)
	return inv
}

// inventoryAndTopology enumerates a fake machine and discovers its topology (PCIe roots derived
// from NVML, as the fake has no sysfs).
func inventoryAndTopology(t testing.TB, machine string, opts ...gputest.Option) (*gpu.Inventory, *topology.Topology) {
	t.Helper()
	m, err := gputest.New(machine, opts...)
	if err != nil {
		t.Fatalf("gputest.New(%s): %v", machine, err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), m)
	if err != nil {
		t.Fatalf("Enumerate(%s): %v", machine, err)
	}
	topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatalf("nvmltopology.Discover(%s): %v", machine, err)
	}
	return inv, topo
}

// slicesFor builds and renders the ResourceSlices of an inventory.
func slicesFor(t testing.TB, inv *gpu.Inventory, opts ...gpudra.Option) []*resourceapi.ResourceSlice {
	t.Helper()
	b := gpudra.NewBuilder(opts...)
	res, err := b.Build(testNode, inv)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), testNode, res)
	if err != nil {
		t.Fatalf("ResourceSlices: %v", err)
	}
	return slices
}

func allDevices(slices []*resourceapi.ResourceSlice) []resourceapi.Device {
	var out []resourceapi.Device
	for _, s := range slices {
		out = append(out, s.Spec.Devices...)
	}
	return out
}

func testUID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// loadWorkload reads a manifest of examples/deploy/workloads with the same loader as the
// reference driver's demo.
func loadWorkload(t testing.TB, path string) *simulate.Workload {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := simulate.LoadWorkload(data, func(n int) types.UID { return types.UID(testUID(n)) })
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return w
}

func workloadPath(name string) string {
	return filepath.Join("examples", "deploy", "workloads", name)
}
