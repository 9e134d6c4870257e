package exclusivetest_test

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/exclusive/exclusivetest"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
)

// fpgaDriver is an FPGA driver's half of an exclusive plugin: two FPGA cards, each given to a
// container as its device node with the bitstream slot to load.
type fpgaDriver struct{}

func (fpgaDriver) Devices(context.Context) ([]resourceapi.Device, error) {
	var out []resourceapi.Device
	for i := range 2 {
		out = append(out, resourceapi.Device{Name: fmt.Sprintf("fpga-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(int64(i))}}})
	}
	return out, nil
}

func (fpgaDriver) Prepare(_ context.Context, _ *resourceapi.ResourceClaim, device string) (specs.ContainerEdits, error) {
	return specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/" + device, Type: "c", Major: 241, Minor: 0}},
		Env: []string{"FPGA_DEVICE=" + device}}, nil
}

func (fpgaDriver) Unprepare(context.Context, types.UID, string) error { return nil }

// Example tests an FPGA driver the way kubelet uses it, without cgo: the plugin serves its real
// gRPC sockets, a fake kubelet registers with it, the scheduler's allocator picks a card from
// the published slices, and the claim is prepared and unprepared through the DRA socket.
func Example() {
	ctx := context.Background()
	node, err := exclusivetest.NewNode()
	if err != nil {
		panic(err)
	}
	defer node.Close()
	plugin, err := node.NewPlugin(ctx, exclusive.Config{DriverName: "fpga.example.com", Driver: fpgaDriver{}})
	if err != nil {
		panic(err)
	}
	defer plugin.Close()
	srv, err := node.Serve(ctx, plugin, exclusive.StartConfig{})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	fmt.Println("registered:", srv.Info.Name)

	claim, err := node.Allocate(ctx, plugin, kubelettest.Claim("bitstream", "fpga.example.com",
		`device.attributes["fpga.example.com"].index == 1`))
	if err != nil {
		panic(err)
	}
	resp, err := srv.Prepare(ctx, claim)
	if err != nil {
		panic(err)
	}
	r := resp.Claims[string(claim.UID)]
	fmt.Println(r.Error == "", r.Devices[0].DeviceName, r.Devices[0].CdiDeviceIds)

	if _, err := srv.Unprepare(ctx, claim); err != nil {
		panic(err)
	}
	specsLeft, _ := node.Specs("fpga.example.com")
	fmt.Println("specs after unprepare:", len(specsLeft))
	// Output:
	// registered: fpga.example.com
	// true fpga-1 [fpga.example.com/claim=00000000-0000-4000-8000-6185a47409b0-fpga-1]
	// specs after unprepare: 0
}
