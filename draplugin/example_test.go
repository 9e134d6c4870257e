package draplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/gpu/gputest"
)

// must returns v, or panics with err: the Examples' setup fails only when the fake machine does.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// ExampleNew builds the plugin on a fake DGX A100 with dynamic MIG, reconciles, and prepares a
// claim that got a 1g.5gb partition: the plugin creates the MIG instance and writes the CDI spec
// whose device ID kubelet passes to the runtime. A real driver calls plugin.Start with a
// Kubernetes client instead of calling PrepareResourceClaims itself.
func ExampleNew() {
	dir := must(os.MkdirTemp("", "gpudra-example"))
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte("example-boot\n"), 0o600); err != nil {
		panic(err)
	}
	machine := must(gputest.New("dgx-a100-40gb"))
	root := must(cditest.Build(filepath.Join(dir, "driver-root"), cditest.Layout{}))
	gen := must(cdi.NewGenerator(must(cdi.Discover(root))))
	writer := must(cdi.NewWriter(cdi.WithSpecDir(filepath.Join(dir, "cdi"))))

	ctx := context.Background()
	plugin, err := draplugin.New(ctx, draplugin.Config{
		NodeName: "node-1", NVML: machine, StateDir: filepath.Join(dir, "state"), BootIDPath: filepath.Join(dir, "boot_id"),
		CDIGenerator: gen, CDIWriter: writer, SliceOptions: []gpudra.Option{gpudra.WithDynamicMIG(nil)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := plugin.Reconcile(ctx); err != nil {
		fmt.Println(err)
		return
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "inference", UID: "0b7c5c1e-7d6b-4a52-9d0e-3f1b2c4d5e6f"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "mig", Driver: gpudra.DefaultDriverName, Pool: "node-1",
				Device: gpudra.MIGDeviceName(gpudra.MIGName{ParentMinor: 0, Profile: "1g.5gb", GIProfileID: 19, PlacementStart: 6})}}}}},
	}
	res := must(plugin.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim}))
	r := res[claim.UID]
	if r.Err != nil {
		fmt.Println(r.Err)
		return
	}
	fmt.Println(r.Devices[0].DeviceName, r.Devices[0].CDIDeviceIDs)
	fmt.Println("MIG instances on GPU 0:", len(machine.GPUInstances(0)))

	errs := must(plugin.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: claim.UID}}))
	fmt.Println("unprepared:", errs[claim.UID] == nil, "MIG instances on GPU 0:", len(machine.GPUInstances(0)))
	// Output:
	// gpu-0-mig-1g5gb-19-6 [k8s.gpu.nvidia.com/claim=0b7c5c1e-7d6b-4a52-9d0e-3f1b2c4d5e6f-gpu-0-mig-1g5gb-19-6]
	// MIG instances on GPU 0: 1
	// unprepared: true MIG instances on GPU 0: 0
}
