package gpudra_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/internal/slicetest"
)

// TestWithoutFeatures checks that WithoutFeatures removes exactly the fields of the features it
// names, whatever the option order, and what the driver publishes instead: on an A30 machine
// with mig-parted's all-balanced layout (per GPU one 2g.12gb and two 1g.6gb instances, so 12
// MIG devices on 4 GPUs) dynamic MIG falls back to those 12 static MIG devices (MIG devices are
// never consumable, and no full GPU is left); on an L4 machine (no MIG) the 8 GPUs keep being
// published, with consumable memory unless it is turned off.
func TestWithoutFeatures(t *testing.T) {
	taintAll := gpudra.WithDeviceTaints(func(string) []resourceapi.DeviceTaint {
		return []resourceapi.DeviceTaint{{Key: "example.com/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	})
	asked := []gpudra.Option{gpudra.WithDynamicMIG(nil), gpudra.WithConsumableMemory(gpudra.ConsumableMemory{}), taintAll}
	const (
		p  = gpudra.FeaturePartitionableDevices
		c  = gpudra.FeatureConsumableCapacity
		tn = gpudra.FeatureDeviceTaints
		bc = gpudra.FeatureDeviceBindingConditions
	)
	a30 := inventory(t, "a30x4", gputest.WithMIGConfig("all-balanced"))
	l4 := inventory(t, "l4x8")
	cases := []struct {
		name      string
		without   []gpudra.Feature
		first     bool // WithoutFeatures before the options it overrides
		wantA30   []gpudra.Feature
		kindsA30  map[string]int
		wantL4    []gpudra.Feature
		wantUsing []gpudra.Feature // Builder.Features
	}{
		{"none", nil, false, []gpudra.Feature{p, tn}, nil, []gpudra.Feature{c, tn}, []gpudra.Feature{p, c, tn}},
		{"partitionable", []gpudra.Feature{p}, false, []gpudra.Feature{tn}, map[string]int{"mig": 12}, []gpudra.Feature{c, tn}, []gpudra.Feature{c, tn}},
		{"partitionable first", []gpudra.Feature{p}, true, []gpudra.Feature{tn}, map[string]int{"mig": 12}, []gpudra.Feature{c, tn}, []gpudra.Feature{c, tn}},
		{"consumable", []gpudra.Feature{c}, false, []gpudra.Feature{p, tn}, nil, []gpudra.Feature{tn}, []gpudra.Feature{p, tn}},
		{"taints", []gpudra.Feature{tn}, true, []gpudra.Feature{p}, nil, []gpudra.Feature{c}, []gpudra.Feature{p, c}},
		{"binding conditions", []gpudra.Feature{bc}, false, []gpudra.Feature{p, tn}, nil, []gpudra.Feature{c, tn}, []gpudra.Feature{p, c, tn}},
		{"all", gpudra.OptionalFeatures(), false, nil, map[string]int{"mig": 12}, nil, nil},
		{"unknown", []gpudra.Feature{"DRASomethingElse"}, false, []gpudra.Feature{p, tn}, nil, []gpudra.Feature{c, tn}, []gpudra.Feature{p, c, tn}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := append(append([]gpudra.Option{}, asked...), gpudra.WithoutFeatures(tc.without...))
			if tc.first {
				opts = append([]gpudra.Option{gpudra.WithoutFeatures(tc.without...)}, asked...)
			}
			if diff := cmp.Diff(tc.wantUsing, gpudra.NewBuilder(opts...).Features()); diff != "" {
				t.Errorf("Builder.Features (-want +got):\n%s", diff)
			}
			a30Slices := slicesFor(t, a30, opts...)
			if diff := cmp.Diff(tc.wantA30, slicetest.FeaturesIn(a30Slices)); diff != "" {
				t.Errorf("features in the A30 slices (-want +got):\n%s", diff)
			}
			if tc.kindsA30 != nil {
				if diff := cmp.Diff(tc.kindsA30, slicetest.DeviceKinds(a30Slices)); diff != "" {
					t.Errorf("A30 devices by kind (-want +got):\n%s", diff)
				}
			}
			l4Slices := slicesFor(t, l4, opts...)
			if diff := cmp.Diff(tc.wantL4, slicetest.FeaturesIn(l4Slices)); diff != "" {
				t.Errorf("features in the L4 slices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]int{"gpu": 8}, slicetest.DeviceKinds(l4Slices)); diff != "" {
				t.Errorf("L4 devices by kind (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOptionalFeaturesAreTheGateNames(t *testing.T) {
	// The names resourceslice.DroppedFieldsError.DisabledFeatures reports, and the gates of
	// k8s.io/kubernetes pkg/features at v1.37.2.
	want := []gpudra.Feature{"DRAPartitionableDevices", "DRAConsumableCapacity", "DRADeviceTaints", "DRADeviceBindingConditions"}
	if diff := cmp.Diff(want, gpudra.OptionalFeatures()); diff != "" {
		t.Errorf("OptionalFeatures (-want +got):\n%s", diff)
	}
}

func ExampleWithoutFeatures() {
	// An API server with DRAPartitionableDevices off would drop the counters of dynamic MIG
	// partitions: publish the A100s as they are partitioned now instead.
	b := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil), gpudra.WithoutFeatures(gpudra.FeaturePartitionableDevices))
	fmt.Println("uses:", b.Features())
	fmt.Println("dynamic MIG:", b.DynamicMIG() != nil)
	// Output:
	// uses: []
	// dynamic MIG: false
}
