package kubeletclient_test

import (
	"context"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/draplugin/kubeletclient"
)

// noDevices is a DRA plugin that prepares nothing and unprepares everything.
type noDevices struct{}

func (noDevices) PrepareResourceClaims(context.Context, []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return nil, nil
}

func (noDevices) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (noDevices) HandleError(context.Context, error, string) {}

func (noDevices) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Example registers a plugin served by the kubelet-plugin helper as kubelet does and asks it
// to unprepare a claim through its DRA socket.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "kubeletclient")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	const driver = "example.com"
	helper, err := kubeletplugin.Start(ctx, noDevices{}, kubeletplugin.DriverName(driver), kubeletplugin.NodeName("node-1"),
		kubeletplugin.KubeClient(fake.NewClientset()), kubeletplugin.RegistrarDirectoryPath(dir),
		kubeletplugin.PluginDataDirectoryPath(dir), kubeletplugin.GRPCVerbosity(10))
	if err != nil {
		panic(err)
	}
	defer helper.Stop()

	k, err := kubeletclient.Connect(ctx, kubeletclient.RegistrationSocket(dir, driver), driver)
	if err != nil {
		panic(err)
	}
	defer k.Close()
	fmt.Println("registered:", k.Info.Name, k.Info.Type)
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}
	resp, err := k.Unprepare(ctx, claim)
	if err != nil {
		panic(err)
	}
	fmt.Printf("unprepared: %q\n", resp.Claims[string(claim.UID)].GetError())
	// Output:
	// registered: example.com DRAPlugin
	// unprepared: ""
}
