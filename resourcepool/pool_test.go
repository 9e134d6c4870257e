package resourcepool_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/resourcepool"
)

// devices returns n devices named accel-0..accel-<n-1>, each changed by mutate when it is set.
func devices(n int, mutate func(*resourceapi.Device)) []resourceapi.Device {
	out := make([]resourceapi.Device, n)
	for i := range out {
		out[i].Name = fmt.Sprintf("accel-%d", i)
		if mutate != nil {
			mutate(&out[i])
		}
	}
	return out
}

// TestNewChunksWithinTheAPILimits: the slice sizes follow the API's limits (128 devices; 64
// when a device uses taints, counters or list attributes; 8 counter sets), counters come first,
// and an empty pool is one empty slice.
func TestNewChunksWithinTheAPILimits(t *testing.T) {
	tainted := func(d *resourceapi.Device) {
		d.Taints = []resourceapi.DeviceTaint{{Key: "example.com/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	listAttr := func(d *resourceapi.Device) {
		d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"links": {StringValues: []string{"a"}}}
	}
	counters := make([]resourceapi.CounterSet, 10)
	for i := range counters {
		counters[i].Name = fmt.Sprintf("set-%d", i)
	}
	cases := []struct {
		name    string
		devices []resourceapi.Device
		opts    []resourceapi.CounterSet
		max     int
		// want is, per slice, "c<counter sets>" or "d<devices>".
		want []string
	}{
		{name: "empty", want: []string{"d0"}},
		{name: "one", devices: devices(1, nil), want: []string{"d1"}},
		{name: "exactly the limit", devices: devices(resourceapi.ResourceSliceMaxDevices, nil), want: []string{"d128"}},
		{name: "300 plain", devices: devices(300, nil), want: []string{"d128", "d128", "d44"}},
		{name: "300 tainted", devices: devices(300, tainted), want: []string{"d64", "d64", "d64", "d64", "d44"}},
		{name: "100 with list attributes", devices: devices(100, listAttr), want: []string{"d64", "d36"}},
		{name: "max 10", devices: devices(25, nil), max: 10, want: []string{"d10", "d10", "d5"}},
		{name: "max above the limit", devices: devices(130, nil), max: 1000, want: []string{"d128", "d2"}},
		{name: "counters first", devices: devices(3, nil), opts: counters, want: []string{"c8", "c2", "d3"}},
		{name: "counters only", opts: counters[:1], want: []string{"c1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool, err := resourcepool.New("node-1", c.devices, resourcepool.WithSharedCounters(c.opts), resourcepool.WithMaxDevicesPerSlice(c.max))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var names []string
			for _, s := range pool.Slices {
				if len(s.SharedCounters) > 0 {
					got = append(got, fmt.Sprintf("c%d", len(s.SharedCounters)))
					continue
				}
				got = append(got, fmt.Sprintf("d%d", len(s.Devices)))
				for _, d := range s.Devices {
					names = append(names, d.Name)
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("slices (-want +got):\n%s", diff)
			}
			var want []string
			for _, d := range c.devices {
				want = append(want, d.Name)
			}
			if diff := cmp.Diff(want, names); diff != "" {
				t.Errorf("devices in publishing order (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidation: names the API server would reject are errors that say which and why.
func TestValidation(t *testing.T) {
	cases := []struct {
		name string
		err  func() error
		want string // substring of the error; "" for none
	}{
		{"valid devices", func() error { return resourcepool.ValidateDevices(devices(3, nil)) }, ""},
		{"upper case device", func() error {
			return resourcepool.ValidateDevices([]resourceapi.Device{{Name: "accel-0"}, {Name: "Accel_1"}})
		}, `devices[1]: name "Accel_1"`},
		{"empty device name", func() error { return resourcepool.ValidateDevices([]resourceapi.Device{{}}) }, `devices[0]: name ""`},
		{"label too long", func() error {
			return resourcepool.ValidateDevices([]resourceapi.Device{{Name: strings.Repeat("a", 64)}})
		}, "must be no more than 63 characters"},
		{"duplicate", func() error {
			return resourcepool.ValidateDevices([]resourceapi.Device{{Name: "accel-0"}, {Name: "accel-1"}, {Name: "accel-0"}})
		}, `devices[2]: name "accel-0" is also the name of devices[0]`},
		{"empty pool name", func() error { _, err := resourcepool.New("", nil); return err }, "pool name is empty"},
		{"bad pool name", func() error { _, err := resourcepool.New("Node_1", nil); return err }, `pool name "Node_1"`},
		{"bad driver", func() error {
			_, err := resourcepool.ResourceSlices("Accel", "node-1", &resourcepool.Pool{Name: "node-1"})
			return err
		}, `driver name "Accel"`},
		{"bad node", func() error {
			_, err := resourcepool.ResourceSlices("accel.example.com", "node 1", &resourcepool.Pool{Name: "node-1"})
			return err
		}, `node name "node 1"`},
		{"nil pool", func() error { _, err := resourcepool.ResourceSlices("accel.example.com", "node-1", nil); return err }, "pool is nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestResourceSlicesAreComplete: every slice names the driver, node and pool, and counts the
// pool's slices, as the API requires of a pool published in several slices.
func TestResourceSlicesAreComplete(t *testing.T) {
	pool, err := resourcepool.New("node-1", devices(200, nil))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := resourcepool.ResourceSlices("accel.example.com", "node-1", pool)
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		Name, Driver, Node, Pool string
		Count                    int64
		Devices                  int
	}
	var got []summary
	for _, o := range objs {
		got = append(got, summary{o.Name, o.Spec.Driver, *o.Spec.NodeName, o.Spec.Pool.Name, o.Spec.Pool.ResourceSliceCount, len(o.Spec.Devices)})
	}
	want := []summary{
		{"node-1-accel.example.com-pool-00000", "accel.example.com", "node-1", "node-1", 2, 128},
		{"node-1-accel.example.com-pool-00001", "accel.example.com", "node-1", "node-1", 2, 72},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slices (-want +got):\n%s", diff)
	}
}
