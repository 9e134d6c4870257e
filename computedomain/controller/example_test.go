package controller_test

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/controller"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// One reconcile of a two-node domain on a cluster with one GB200 node: the controller chooses
// the node's clique and makes the channel template and the IMEX daemons.
func Example() {
	scheme := runtime.NewScheme()
	if err := controller.AddToScheme(scheme); err != nil {
		fmt.Println(err)
		return
	}
	domain := &cdv1beta1.ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Name: "training", Namespace: "team-a", UID: "1234"},
		Spec: cdv1beta1.ComputeDomainSpec{NumNodes: 1, Channel: &cdv1beta1.ComputeDomainChannelSpec{
			ResourceClaimTemplate: cdv1beta1.ResourceClaimTemplateReference{Name: "training-channel"},
		}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gb200-0"}}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gb200-0-compute-domain"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: computedomain.DriverName, NodeName: ptr.To("gb200-0"), Pool: resourcev1.ResourcePool{Name: "gb200-0", ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "channel-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				computedomain.AttrType:     {StringValue: ptr.To(computedomain.TypeChannel)},
				computedomain.AttrCliqueID: {StringValue: ptr.To("cluster-1.7")},
			}}},
		},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(domain).WithObjects(domain, node, slice).Build()

	r, err := controller.New(c,
		controller.WithDriverNamespace("nvidia-dra"),
		controller.WithDaemonPodTemplate(corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "imex", Image: "example.com/imex-daemon:v1"}},
		}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(domain)}); err != nil {
		fmt.Println(err)
		return
	}

	if err := c.Get(ctx, client.ObjectKeyFromObject(domain), domain); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("clique:", domain.Status.CliqueID, domain.Status.Status)
	var channel resourcev1.ResourceClaimTemplate
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "training-channel"}, &channel); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("channel:", channel.Spec.Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression)
	var ds appsv1.DaemonSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: "nvidia-dra", Name: controller.DaemonName("1234")}, &ds); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("daemons:", ds.Name, "on nodes", ds.Spec.Template.Spec.NodeSelector)
	// Output:
	// clique: cluster-1.7 NotReady
	// channel: device.attributes['compute-domain.nvidia.com'].cliqueID == 'cluster-1.7'
	// daemons: computedomain-daemon-1234 on nodes map[resource.nvidia.com/computeDomain:1234]
}
