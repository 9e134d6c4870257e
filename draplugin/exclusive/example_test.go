package exclusive_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/exclusive"
)

// twoAccelerators is the smallest complete Driver: two devices, accel-0 and accel-1, each given
// to a container as its device node /dev/accel-<N> (character device 240:<N>). A real driver
// lists what it finds on the node and reserves a device in Prepare (examples/accel-dra-driver).
type twoAccelerators struct{}

var _ exclusive.Driver = twoAccelerators{}

// Devices lists the node's devices, with names stable across restarts.
func (twoAccelerators) Devices(context.Context) ([]resourceapi.Device, error) {
	return []resourceapi.Device{{Name: "accel-0"}, {Name: "accel-1"}}, nil
}

// Prepare returns the container edits that give a container the device; the plugin writes them
// into the claim's CDI spec. It may be called again for the same claim after a crash.
func (twoAccelerators) Prepare(_ context.Context, _ *resourceapi.ResourceClaim, device string) (specs.ContainerEdits, error) {
	minor := int64(strings.TrimPrefix(device, "accel-")[0] - '0')
	return specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/" + device, Type: "c", Major: 240, Minor: minor}}}, nil
}

// Unprepare undoes Prepare: nothing to undo here, as Prepare reserved nothing.
func (twoAccelerators) Unprepare(context.Context, types.UID, string) error { return nil }

// Example prepares a claim that got accel-1 as kubelet would, prepares it again (answered from
// the checkpoint), and unprepares it.
func Example() {
	dir, err := os.MkdirTemp("", "exclusive")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	writer, err := cdi.NewWriter(cdi.WithSpecDir(filepath.Join(dir, "cdi")), cdi.WithWriterKind("accel.example.com", "claim"))
	if err != nil {
		panic(err)
	}
	plugin, err := exclusive.New(ctx, exclusive.Config{DriverName: "accel.example.com", NodeName: "node-1",
		Driver: twoAccelerators{}, StateDir: filepath.Join(dir, "state"), CDIWriter: writer})
	if err != nil {
		panic(err)
	}
	defer plugin.Close()

	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", UID: "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "accel", Driver: "accel.example.com", Pool: "node-1", Device: "accel-1"}},
		}}},
	}
	for range 2 {
		res, _ := plugin.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
		fmt.Println(res[claim.UID].Devices[0].CDIDeviceIDs, res[claim.UID].Err)
	}
	specsLeft, _ := writer.List()
	fmt.Println("specs:", len(specsLeft))
	errs, _ := plugin.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: claim.UID}})
	specsLeft, _ = writer.List()
	fmt.Println("unprepared:", errs[claim.UID], "specs:", len(specsLeft))
	// Output:
	// [accel.example.com/claim=0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01-accel-1] <nil>
	// [accel.example.com/claim=0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01-accel-1] <nil>
	// specs: 1
	// unprepared: <nil> specs: 0
}
