package deviceplugin_test

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/deviceplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// extendedClaim is the claim the scheduler writes for a pod whose one container asks for count
// of one extended resource (KEP-5004): one request, container-0-request-0, for count devices of
// the class that maps the resource.
func extendedClaim(name, class string, count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: draplugintest.UID(name),
			Annotations: map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "container-0-request-0",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}}}},
	}
}

// TestConvertedClassesServeThePods: on a node with whole GPUs and MIG devices, the classes a
// mixed time-slicing config becomes give a pod asking for nvidia.com/gpu: 2 and
// nvidia.com/mig-1g.5gb: 1 two whole GPUs and one 1g.5gb device (the scheduler's allocator),
// with the class's TimeSlicing config, and the plugin prepares them.
func TestConvertedClassesServeThePods(t *testing.T) {
	node, err := draplugintest.NewNode("dgx-a100-40gb", draplugintest.WithMachineOptions(
		gputest.WithMIG(0, "1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"), gputest.WithMIG(1, "3g.20gb", "3g.20gb")))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	cfg, err := deviceplugin.Parse([]byte(`version: v1
flags: {migStrategy: mixed}
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, replicas: 4}
    - {name: nvidia.com/mig-1g.5gb, replicas: 2}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := deviceplugin.Convert(cfg)
	if err != nil {
		t.Fatal(err)
	}
	slices, err := node.ResourceSlices()
	if err != nil {
		t.Fatal(err)
	}
	published := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			published[d.Name] = d
		}
	}
	sim := simulate.New(node.Name, append(selectors.DeviceClasses(""), res.Classes...), slices)
	claim, err := sim.Allocate(context.Background(), extendedClaim("pod-1-extended-resources", "gpu.extended.nvidia.com", 2))
	if err != nil {
		t.Fatal(err)
	}
	mig, err := sim.Allocate(context.Background(), extendedClaim("pod-2-extended-resources", "mig-1g.5gb.extended.nvidia.com", 1))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pod-1-extended-resources": "gpu", "pod-2-extended-resources": "1g.5gb"}
	p, err := node.NewPlugin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*resourceapi.ResourceClaim{claim, mig} {
		results := c.Status.Allocation.Devices.Results
		for _, r := range results {
			d := published[r.Device]
			got := ptr.Deref(d.Attributes[gpudra.AttrType].StringValue, "")
			if got == gpudra.DeviceTypeMIG {
				got = ptr.Deref(d.Attributes[gpudra.AttrProfile].StringValue, "")
			}
			if got != want[c.Name] {
				t.Errorf("claim %s got %s (%s), want a %s", c.Name, r.Device, got, want[c.Name])
			}
		}
		cfgs := c.Status.Allocation.Devices.Config
		// The one request uses the class: its config applies to all of the claim (no requests).
		if len(cfgs) != 1 || cfgs[0].Source != resourceapi.AllocationConfigSourceClass || len(cfgs[0].Requests) != 0 ||
			!strings.Contains(string(cfgs[0].Opaque.Parameters.Raw), `"strategy":"TimeSlicing"`) {
			t.Errorf("claim %s: allocation config %+v, want the class's TimeSlicing config", c.Name, cfgs)
		}
		devs, err := draplugintest.Prepare(context.Background(), p, c)
		if err != nil || len(devs) != len(results) {
			t.Errorf("prepare %s: %d devices, %v", c.Name, len(devs), err)
		}
	}
	if n := len(claim.Status.Allocation.Devices.Results); n != 2 {
		t.Errorf("nvidia.com/gpu: 2 got %d devices", n)
	}
}

// TestConvertedMPSClassLimitsClients: the MPS class of a 4-replica config starts the claim's
// MPS daemon with each client at 25% of the multiprocessors, as the device plugin's daemon.
func TestConvertedMPSClassLimitsClients(t *testing.T) {
	node, err := draplugintest.NewNode("l4x8")
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	cfg, err := deviceplugin.Parse([]byte("sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := deviceplugin.Convert(cfg)
	if err != nil {
		t.Fatal(err)
	}
	slices, err := node.ResourceSlices()
	if err != nil {
		t.Fatal(err)
	}
	sim := simulate.New(node.Name, res.Classes, slices)
	claim, err := sim.Allocate(context.Background(), extendedClaim("mps-pod-extended-resources", res.Classes[0].Name, 1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := node.NewPlugin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := draplugintest.Prepare(context.Background(), p, claim); err != nil {
		t.Fatal(err)
	}
	daemons := node.Host.State().Daemons
	d, ok := daemons[string(claim.UID)]
	if len(daemons) != 1 || !ok || ptr.Deref(d.ActiveThreadPercentage, 0) != 25 {
		t.Errorf("MPS daemons %+v, want the claim's with active thread percentage 25", daemons)
	}
}
