package nodeplugin_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/exclusive/exclusivetest"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/gpu/gputest"
)

// Example prepares a workload's IMEX channel on the first tray of a fake NVL72 rack, whose IMEX
// daemon is already Ready in its domain's status: the container gets channel 0.
func Example() {
	ctx := context.Background()
	rack, _ := gputest.NVLDomain("rack", 0, 0)
	tray := rack[0]
	machine, _ := gputest.New("gb200-nvl4", tray.Options()...)

	scheme, _ := nodeplugin.NewScheme()
	dom := &v1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", UID: domainUID},
		Spec: v1beta1.ComputeDomainSpec{NumNodes: 1},
		Status: v1beta1.ComputeDomainStatus{Status: v1beta1.StatusReady, CliqueID: tray.CliqueID(),
			Nodes: []v1beta1.ComputeDomainNode{{Name: tray.Name, IPAddress: "10.0.0.1", CliqueID: tray.CliqueID(), Status: v1beta1.StatusReady}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(dom).
		WithObjects(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tray.Name}}, dom).Build()

	node, _ := exclusivetest.NewNode(exclusivetest.WithNodeName(tray.Name))
	defer node.Close()
	driver, err := nodeplugin.New(nodeplugin.Config{NodeName: tray.Name, StateDir: node.StateDir,
		Fabric: fabricOf(machine), Domains: nodeplugin.NewClientDomains(c),
		Channels: &fakeChannels{}}) // nodeplugin.NewHostChannels("", "") on a node
	if err != nil {
		panic(err)
	}
	plugin, err := node.NewPlugin(ctx, exclusive.Config{DriverName: computedomain.DriverName, Driver: driver})
	if err != nil {
		panic(err)
	}
	defer plugin.Close()

	claim, err := node.Allocate(ctx, plugin, claim("job", channelSel, channelParams(domainUID, "")))
	if err != nil {
		panic(err)
	}
	devices, err := kubelettest.Prepare(ctx, plugin, claim)
	if err != nil {
		panic(err)
	}
	fmt.Println(devices[0].DeviceName)
	// Output: channel-0
}
