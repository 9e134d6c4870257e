package scale

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// The upstream-basic kind: the devices, class and pre-fill of upstream scheduler_perf's
// SchedulingWithResourceClaimTemplate workload (k8s.io/kubernetes
// test/integration/scheduler_perf/dra: templates/resourceslice-basic-devices.yaml with
// numDevices 10 and numPCIRoots 2, templates/deviceclass.yaml, and 5000pods_500nodes'
// initClaims: half the devices allocated before the measured pods), rebuilt here as facts
// (shapes and values), so that our kinds have an anchor scheduled by the same binaries in the
// same run.
const (
	upstreamDriver  = "test-driver.cdi.k8s.io"
	upstreamClass   = "test-class"
	upstreamDevices = 10
	upstreamRoots   = 2
)

// upstreamDeviceClass selects every device of the upstream test driver.
func upstreamDeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: upstreamClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q`, upstreamDriver)}}}}}
}

// upstreamSlice is node i's one ResourceSlice of upstreamDevices basic devices, 13 attributes
// and 2 capacities each.
func upstreamSlice(i int) *resourceapi.ResourceSlice {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("resourceslice-%d", i)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   upstreamDriver,
			NodeName: ptr.To(nodeName(i)),
			Pool:     resourceapi.ResourcePool{Name: fmt.Sprintf("resourceslice-%d", i), Generation: 1, ResourceSliceCount: 1},
		},
	}
	for d := range upstreamDevices {
		root := d % upstreamRoots
		bus := fmt.Sprintf("0000:0%d:00.0", d)
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("basic-device-%d", d),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"driver":                          str("xe"),
				"driverVersion":                   {VersionValue: ptr.To("1.2.3")},
				"resource.k8s.io/pciRoot":         str(fmt.Sprint(root)),
				"family":                          str("Arc Pro B-Series"),
				"health":                          str("Healthy"),
				"model":                           str("B60"),
				"pciAddress":                      str(bus),
				"pciId":                           str("0xe211"),
				"pciRoot":                         str(fmt.Sprintf("0%d", root)),
				"resource.kubernetes.io/pciBusID": str(bus),
				"resource.kubernetes.io/pciRoot":  str(fmt.Sprintf("pci0000:0%d", root)),
				"sriov":                           {BoolValue: ptr.To(true)},
				"type":                            str("gpu"),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory":     {Value: resource.MustParse("24480Mi")},
				"millicores": {Value: resource.MustParse("1k")},
			},
		})
	}
	return s
}

// prefillUpstream allocates half of every node's basic devices to claims of their own (in the
// namespace "init", reserved for nobody), as scheduler_perf's allocResourceClaims step
// allocates its init claims before the measured pods.
func (c *cluster) prefillUpstream(ctx context.Context, nodes int) error {
	const ns = "init"
	if err := framework.CreateNamespace(ctx, c.client, ns, nil); err != nil {
		return err
	}
	return parallel(ctx, nodes*upstreamDevices/2, func(ctx context.Context, k int) error {
		node, dev := k/(upstreamDevices/2), k%(upstreamDevices/2)
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("init-%05d", k)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "req-0", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: upstreamClass}}}}},
		}
		created, err := c.client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create init claim %s: %w", claim.Name, err)
		}
		created.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "req-0", Driver: upstreamDriver, Pool: fmt.Sprintf("resourceslice-%d", node), Device: fmt.Sprintf("basic-device-%d", dev),
			}}}}
		if _, err := c.client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("allocate init claim %s: %w", claim.Name, err)
		}
		return nil
	})
}

// checkExclusive checks that no device is allocated to two claims in any namespace: the
// measured claims went around the pre-filled ones.
func (c *cluster) checkExclusive(ctx context.Context) error {
	claims, err := c.client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	owner := map[string]string{}
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			dev := r.Driver + "/" + r.Pool + "/" + r.Device
			if o, ok := owner[dev]; ok {
				return fmt.Errorf("device %s is allocated to both %s and %s/%s", dev, o, cl.Namespace, cl.Name)
			}
			owner[dev] = cl.Namespace + "/" + cl.Name
		}
	}
	return nil
}
