package fakekubelet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// echoPlugin prepares every allocated device as one CDI device named after it.
type echoPlugin struct{}

func (echoPlugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var r kubeletplugin.PrepareResult
		for _, res := range c.Status.Allocation.Devices.Results {
			r.Devices = append(r.Devices, kubeletplugin.Device{Requests: []string{res.Request}, PoolName: res.Pool, DeviceName: res.Device,
				CDIDeviceIDs: []string{"example.com/device=" + res.Device}})
		}
		out[c.UID] = r
	}
	return out, nil
}

func (echoPlugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (echoPlugin) HandleError(context.Context, error, string) {}

func (echoPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Example registers an in-process plugin through its registration socket and prepares a claim
// through its DRA socket, as kubelet would.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fk")
	defer os.RemoveAll(dir)
	reg, data := filepath.Join(dir, "reg"), filepath.Join(dir, "data")
	_ = os.Mkdir(reg, 0o755)
	_ = os.Mkdir(data, 0o755)
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim", UID: "uid-1"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "example.com", Pool: "node-1", Device: "dev-0"}}}}},
	}
	helper, err := kubeletplugin.Start(ctx, echoPlugin{}, kubeletplugin.DriverName("example.com"), kubeletplugin.NodeName("node-1"),
		kubeletplugin.KubeClient(fake.NewClientset(claim)), kubeletplugin.RegistrarDirectoryPath(reg), kubeletplugin.PluginDataDirectoryPath(data))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer helper.Stop()

	sockets, err := fakekubelet.Sockets(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := fakekubelet.Register(ctx, sockets[0])
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	fmt.Println("registered", p.Info.Name)
	c := fakekubelet.Claim{Namespace: "ns", Name: "claim", UID: "uid-1"}
	resp, err := p.Prepare(ctx, c)
	if err := fakekubelet.PrepareErrors(resp, err, c); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("prepared", resp.Claims["uid-1"].Devices[0].CdiDeviceIds)
	resp2, err := p.Unprepare(ctx, c)
	fmt.Println("unprepared, error:", fakekubelet.UnprepareErrors(resp2, err, c))
	// Output:
	// registered example.com
	// prepared [example.com/device=dev-0]
	// unprepared, error: <nil>
}
