package objects_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/computedomain/objects"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/topology"
)

// A node whose GPUs are in one clique publishes a channel and a daemon device, and a domain's
// channel template asks for a channel in that clique.
func Example() {
	fabric := &topology.Fabric{ClusterUUID: "c0ffee00-0000-4000-8000-000000000001", CliqueID: 7}
	clique, err := objects.Clique([]topology.GPU{{Index: 0, Fabric: fabric}, {Index: 1, Fabric: fabric}})
	if err != nil {
		panic(err)
	}
	for _, d := range objects.Devices(clique) {
		fmt.Println(d.Name)
	}
	cd := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ml"},
		Spec: cdv1beta1.ComputeDomainSpec{NumNodes: 2, Channel: &cdv1beta1.ComputeDomainChannelSpec{
			ResourceClaimTemplate: cdv1beta1.ResourceClaimTemplateReference{Name: "job-channel"}}}}
	t := objects.ChannelTemplate(cd, clique)
	r := t.Spec.Spec.Devices.Requests[0].Exactly
	fmt.Println(t.Namespace+"/"+t.Name, r.DeviceClassName)
	fmt.Println(r.Selectors[0].CEL.Expression)
	// Output:
	// channel-0
	// daemon-0
	// ml/job-channel compute-domain-default-channel.nvidia.com
	// device.attributes['compute-domain.nvidia.com'].cliqueID == 'c0ffee00-0000-4000-8000-000000000001.7'
}
