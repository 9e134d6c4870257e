package draplugin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
	"github.com/gpudra/gpudra/simulate"
)

// republish makes the env's allocator see what p publishes now.
func (e *env) republish(p *draplugin.Plugin) {
	e.t.Helper()
	if err := e.Republish(context.Background(), p); err != nil {
		e.t.Fatal(err)
	}
}

// TestDynamicMIGUsesTheGPUsGeometry: a GPU whose 4g.20gb may also sit at 4:4 (the catalog
// allows 0:4 only) next to an instance another tool made at 0: the partition at 4 is published,
// and preparing it creates the instance there — slices and instance creation both use the
// geometry the GPU reports, not the catalog. The difference is counted in a metric.
func TestDynamicMIGUsesTheGPUsGeometry(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true, gputest.WithMIG(0, "1g.5gb@0"),
		gputest.WithMIGProfileEdit("4g.20gb", func(p *mig.GIProfile) {
			p.Placements = append(p.Placements, mig.Placement{Start: 4, Size: 4})
		}))
	reg := prometheus.NewRegistry()
	p := e.plugin(withMetrics(reg))
	e.reconcile(p)
	e.republish(p)
	c := e.claim("mig.nvidia.com", migProfileOn("4g.20gb", 0), "")
	if got := c.Status.Allocation.Devices.Results[0].Device; !strings.HasSuffix(got, "-4") {
		t.Fatalf("allocated %s; want the 4g.20gb at 4, the only one beside the instance at 0", got)
	}
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatalf("prepare the device-only placement: %v", err)
	}
	if diff := cmp.Diff([]string{"0:1g.5gb@0", "0:4g.20gb@4"}, e.MIGInstances(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("MIG instances (-want +got):\n%s", diff)
	}
	want := `# HELP gpudra_plugin_mig_catalog_differences 1 for each MIG profile property where the built-in catalog differs from what the GPU reports; the GPU's value is used.
# TYPE gpudra_plugin_mig_catalog_differences gauge
gpudra_plugin_mig_catalog_differences{model="A100-SXM4-40GB",profile="4g.20gb",property="placements"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), draplugin.MetricMIGCatalogDifferences); err != nil {
		t.Error(err)
	}
}

// TestDynamicMIGWithdrawsPlacementsBesideForeignInstances: a 3g.20gb at 4 that no claim
// records (another tool's) takes GPU 0's slices 4-7: the allocator fits four 1g.5gb there and
// no fifth, and never the whole GPU — instead of handing out placements whose prepare NVML
// would refuse. Once the instance is gone and the plugin republishes, the slices are free again.
func TestDynamicMIGWithdrawsPlacementsBesideForeignInstances(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true, gputest.WithMIG(0, "3g.20gb@4"))
	p := e.plugin()
	e.reconcile(p)
	e.republish(p)
	var small []*resourceapi.ResourceClaim
	for i := range 4 {
		c := e.claim("mig.nvidia.com", migProfileOn("1g.5gb", 0), "")
		if _, err := prepareOne(t, p, c); err != nil {
			t.Fatalf("1g.5gb #%d on the free half: %v", i+1, err)
		}
		small = append(small, c)
	}
	if _, err := e.Allocate(context.Background(), claimFor("fifth", migProfileOn("1g.5gb", 0))); !errors.Is(err, simulate.ErrUnschedulable) {
		t.Errorf("fifth 1g.5gb beside the foreign 3g.20gb: %v; want unschedulable", err)
	}
	whole := claimFor("whole", "device.attributes['gpu.nvidia.com'].type == 'gpu' && "+gpuIndex(0))
	if _, err := e.Allocate(context.Background(), whole); !errors.Is(err, simulate.ErrUnschedulable) {
		t.Errorf("whole GPU 0 under a foreign instance: %v; want unschedulable", err)
	}

	removeInstance(t, e, 0, "3g.20gb@4") // the other tool removes its instance
	for _, c := range small {
		if err := unprepareOne(t, p, c); err != nil {
			t.Fatal(err)
		}
		e.Release(c)
	}
	e.republish(p)
	c, err := e.Allocate(context.Background(), whole)
	if err != nil {
		t.Fatalf("whole GPU 0 once no instance is left: %v", err)
	}
	if _, err := prepareOne(t, p, c); err != nil {
		t.Errorf("prepare the whole GPU 0: %v", err)
	}
}

// TestDynamicMIGRepublishesAsInstancesChange: the published order follows the instances: once a
// 1g.5gb exists on GPU 3, the next 1g.5gb partition offered first is on GPU 3 (fill the partly
// used GPU), in the slices the plugin itself publishes through the API server.
func TestDynamicMIGRepublishesAsInstancesChange(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	c := e.claim("mig.nvidia.com", migProfileOn("1g.5gb", 3), "")
	p := e.plugin()
	srv, err := e.Serve(context.Background(), p, draplugin.StartConfig{NoHealthMonitor: true}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	first := func() string {
		list, err := srv.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return firstProfileDevice(list.Items, "1g.5gb")
	}
	waitFor(t, func() bool { return strings.HasPrefix(first(), "gpu-0-") }, "the first 1g.5gb on GPU 0 before any instance exists")
	resp, err := srv.Prepare(context.Background(), c)
	if err != nil || resp.Claims[string(c.UID)].Error != "" {
		t.Fatalf("prepare: %v %v", resp, err)
	}
	waitFor(t, func() bool { return strings.HasPrefix(first(), "gpu-3-") }, "the first 1g.5gb on GPU 3, beside the instance the claim got")
}

// firstProfileDevice names the first device of a MIG profile in the slices, in publishing order
// (slices by name, as the allocator reads them, then devices in order).
func firstProfileDevice(slices []resourceapi.ResourceSlice, profile string) string {
	best, bestSlice := "", ""
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes["profile"]; ok && a.StringValue != nil && *a.StringValue == profile {
				if best == "" || s.Name < bestSlice {
					best, bestSlice = d.Name, s.Name
				}
				break
			}
		}
	}
	return best
}

// claimFor is an unallocated claim for one MIG device matching selector.
func claimFor(name, selector string) *resourceapi.ResourceClaim {
	class := "mig.nvidia.com"
	if strings.Contains(selector, "type == 'gpu'") {
		class = "gpu.nvidia.com"
	}
	return draplugintest.Claim(name, class, selector, "")
}

// removeInstance removes a MIG instance ("3g.20gb@4") from a GPU through NVML, as an
// administrator or another tool would, behind the plugin's back.
func removeInstance(t *testing.T, e *env, gpuIndex int, instance string) {
	t.Helper()
	mgr, layout := operatorMIG(t, e, gpuIndex, instance)
	if err := mgr.Remove(layout); err != nil {
		t.Fatal(err)
	}
}

// applyInstances creates MIG instances ("1g.5gb@4", ...) on a GPU through NVML, as an
// operator's tool would, behind the plugin's back.
func applyInstances(t *testing.T, e *env, gpuIndex int, instances ...string) {
	t.Helper()
	mgr, layout := operatorMIG(t, e, gpuIndex, strings.Join(instances, ","))
	if _, err := mgr.Apply(layout); err != nil {
		t.Fatal(err)
	}
}

// operatorMIG is a MIG instance manager of a GPU of the node, as another tool would use, and a
// parsed layout.
func operatorMIG(t *testing.T, e *env, gpuIndex int, layout string) (*nvmlmig.InstanceManager, []mig.Instance) {
	t.Helper()
	model, err := mig.Lookup(e.Inventory.GPUs[gpuIndex].ProductName)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := nvmlmig.NewInstanceManager(e.Machine.Device(gpuIndex), model)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mig.ParseLayout(layout)
	if err != nil {
		t.Fatal(err)
	}
	return mgr, l
}
