package serving

import (
	"context"
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/resourcepool"
)

// PublishFirst publishes a plugin's pool for the first time: it creates the ResourceSlices
// itself when the node has none of the driver's, then hands the pool to the kubelet-plugin
// helper as Publish does.
//
// Why: the helper's ResourceSlice controller (k8s.io/dynamic-resource-allocation v0.37
// resourceslice.StartController) checks whether its informer has synced right after starting it
// and, since it cannot have, sleeps a whole second before checking again and creating the
// slices: every driver on the helper publishes no sooner than a second after it starts. The
// slices created here are the ones the controller would create — same generated names (the hex
// index of the slice, driver and node), owner (the Node, as controller), pool generation 1 and
// content — so its first sync finds nothing to change and writes nothing
// (TestStartToSlices in test/e2e checks that against a real API server). Should a future
// controller name or fill slices differently, it replaces them once: a start-up cost, not a
// fault. When the node already has slices of the driver (a restart), or any call here fails,
// PublishFirst leaves the work to the controller.
func PublishFirst(ctx context.Context, helper *kubeletplugin.Helper, client kubernetes.Interface, driver, node string,
	resources func(context.Context) (*resourcepool.Pool, error)) error {
	if helper == nil {
		return nil
	}
	pool, err := resources(ctx)
	if err != nil {
		return fmt.Errorf("build ResourceSlices: %w", err)
	}
	res := DriverResources(pool)
	if n, err := CreateFirstSlices(ctx, client, driver, node, res); err != nil {
		klog.FromContext(ctx).Error(err, "Creating the first ResourceSlices directly failed; the ResourceSlice controller publishes them", "created", n)
	}
	if err := helper.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("publish ResourceSlices: %w", err)
	}
	return nil
}

// sliceIndexMinLength is the shortest hex index the ResourceSlice controller puts at the start
// of the names it generates (resourceslice.resourceSliceIndexMinLength in v0.37).
const sliceIndexMinLength = 5

// CreateFirstSlices creates the ResourceSlices of the node's pools in res as the helper's
// ResourceSlice controller would on its first sync, unless the node already has a slice of the
// driver. It returns how many it created.
func CreateFirstSlices(ctx context.Context, client kubernetes.Interface, driver, node string, res resourceslice.DriverResources) (int, error) {
	slicesAPI := client.ResourceV1().ResourceSlices()
	existing, err := slicesAPI.List(ctx, metav1.ListOptions{Limit: 1, FieldSelector: fields.Set{
		resourceapi.ResourceSliceSelectorNodeName: node, resourceapi.ResourceSliceSelectorDriver: driver}.String()})
	if err != nil {
		return 0, fmt.Errorf("list the ResourceSlices of node %s: %w", node, err)
	}
	if len(existing.Items) > 0 {
		return 0, nil
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("get node %s: %w", node, err)
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID, Controller: ptr.To(true)}
	created := 0
	for poolName, pool := range res.Pools {
		width := max(sliceIndexMinLength, len(strconv.FormatInt(int64(len(pool.Slices)-1), 16)))
		for i, s := range pool.Slices {
			slice := &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{
					GenerateName:    fmt.Sprintf("%0*x-%s-%s-", width, i, driver, node),
					OwnerReferences: []metav1.OwnerReference{owner},
				},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:                 driver,
					Pool:                   resourceapi.ResourcePool{Name: poolName, Generation: max(1, pool.Generation), ResourceSliceCount: int64(len(pool.Slices))},
					NodeName:               ptr.To(node),
					Devices:                s.Devices,
					SharedCounters:         s.SharedCounters,
					PerDeviceNodeSelection: s.PerDeviceNodeSelection,
					PartitionTypeAttribute: s.PartitionTypeAttribute,
					SkipNodeOperations:     s.SkipNodeOperations,
				},
			}
			if _, err := slicesAPI.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				return created, fmt.Errorf("create ResourceSlice %d of pool %s: %w", i, poolName, err)
			}
			created++
		}
	}
	return created, nil
}
