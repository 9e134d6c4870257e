package draplugin_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
)

// Short names of the optional features, for test tables.
const (
	fPart  = gpudra.FeaturePartitionableDevices
	fCons  = gpudra.FeatureConsumableCapacity
	fTaint = gpudra.FeatureDeviceTaints
	fBind  = gpudra.FeatureDeviceBindingConditions
)

// gateSubsets returns every subset of the optional features, each in OptionalFeatures order.
func gateSubsets() [][]gpudra.Feature {
	all := gpudra.OptionalFeatures()
	var out [][]gpudra.Feature
	for mask := range 1 << len(all) {
		var s []gpudra.Feature
		for i, f := range all {
			if mask&(1<<i) != 0 {
				s = append(s, f)
			}
		}
		out = append(out, s)
	}
	return out
}

// subsetName names a set of features turned off ("all-on", "off-partitionable-taints").
func subsetName(off []gpudra.Feature) string {
	if len(off) == 0 {
		return "all-on"
	}
	short := map[gpudra.Feature]string{fPart: "partitionable", fCons: "consumable", fTaint: "taints", fBind: "binding"}
	parts := []string{"off"}
	for _, f := range off {
		parts = append(parts, short[f])
	}
	return strings.Join(parts, "-")
}

// probeFields are the fields of NegotiateFeatures' probe slices each feature guards, as the
// API server's ResourceSlice strategy drops them (k8s.io/kubernetes v1.37
// pkg/registry/resource/resourceslice): the shared counters of the counter slice, then the
// probe device's fields in JSON name order.
var probeFields = map[gpudra.Feature][]string{
	fPart:  {"spec.sharedCounters", "spec.devices[0].consumesCounters"},
	fCons:  {"spec.devices[0].allowMultipleAllocations", "spec.devices[0].capacity.memory.requestPolicy"},
	fTaint: {"spec.devices[0].taints"},
	fBind:  {"spec.devices[0].bindingConditions", "spec.devices[0].bindingFailureConditions", "spec.devices[0].bindsToNode"},
}

func fastBackoff(steps int) draplugin.NegotiateOption {
	return draplugin.WithNegotiationBackoff(wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: steps})
}

// TestNegotiateFeaturesPerGateCombination negotiates with a fake API server for every
// combination of gates turned off: the dropped features are exactly those, each with the fields
// the server dropped, and the dry runs stored nothing.
func TestNegotiateFeaturesPerGateCombination(t *testing.T) {
	for _, off := range gateSubsets() {
		t.Run(subsetName(off), func(t *testing.T) {
			client := draplugintest.NewAPIClient(off)
			got, err := draplugin.NegotiateFeatures(context.Background(), client, gpudra.DefaultDriverName, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			want := &draplugin.APIFeatures{}
			for _, f := range gpudra.OptionalFeatures() {
				if fields, dropped := probeFields[f], contains(off, f); dropped {
					want.Dropped = append(want.Dropped, draplugin.DroppedFeature{Feature: f, Fields: fields})
				} else {
					want.Kept = append(want.Kept, f)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("NegotiateFeatures (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(off, got.Without()); diff != "" {
				t.Errorf("Without (-want +got):\n%s", diff)
			}
			stored, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
			if err != nil || len(stored.Items) != 0 {
				t.Errorf("the dry runs stored %d slices (err %v), want none", len(stored.Items), err)
			}
		})
	}
}

// TestNegotiateFeaturesAgreesWithTheHelper holds NegotiateFeatures to the kubelet-plugin
// helper's own verdict: for every combination of gates off, resourceslice.DroppedFieldsError
// (what the helper reports when a published slice comes back with fewer fields) names, for the
// probes sent and what the server returned, exactly the features NegotiateFeatures drops.
func TestNegotiateFeaturesAgreesWithTheHelper(t *testing.T) {
	for _, off := range gateSubsets() {
		t.Run(subsetName(off), func(t *testing.T) {
			client := draplugintest.NewAPIClient(off)
			var helperSays []gpudra.Feature
			client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
				sent := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
				reply := draplugintest.DropDisabledFields(sent, off...)
				e := &resourceslice.DroppedFieldsError{DesiredSlice: sent, ActualSlice: reply}
				for _, name := range e.DisabledFeatures() {
					if !contains(helperSays, gpudra.Feature(name)) {
						helperSays = append(helperSays, gpudra.Feature(name))
					}
				}
				return true, reply, nil
			})
			got, err := draplugin.NegotiateFeatures(context.Background(), client, gpudra.DefaultDriverName, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			sort.Slice(helperSays, func(i, j int) bool { return helperSays[i] < helperSays[j] })
			without := got.Without()
			sort.Slice(without, func(i, j int) bool { return without[i] < without[j] })
			if diff := cmp.Diff(helperSays, without); diff != "" {
				t.Errorf("dropped features (-helper +NegotiateFeatures):\n%s", diff)
			}
		})
	}
}

func contains(fs []gpudra.Feature, f gpudra.Feature) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}

// dropOnDryRun makes the client's dry-run ResourceSlice creates return the slice as edit
// leaves it, as a server that drops other fields than the fake's gates would.
func dropOnDryRun(client *fake.Clientset, edit func(*resourceapi.ResourceSlice)) {
	client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice).DeepCopy()
		edit(s)
		return true, s, nil
	})
}

// TestNegotiateFeaturesSeesEveryDroppedField drops one field at a time, where the
// kubelet-plugin helper's own check (DroppedFieldsError) would not notice: the feature that
// guards the field is still dropped. Fields of no feature are reported apart.
func TestNegotiateFeaturesSeesEveryDroppedField(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(s *resourceapi.ResourceSlice)
		want  []draplugin.DroppedFeature
		other []string
	}{
		{"requestPolicy only", func(s *resourceapi.ResourceSlice) {
			for i := range s.Spec.Devices {
				c := s.Spec.Devices[i].Capacity["memory"]
				c.RequestPolicy = nil
				s.Spec.Devices[i].Capacity["memory"] = c
			}
		}, []draplugin.DroppedFeature{{Feature: fCons, Fields: []string{"spec.devices[0].capacity.memory.requestPolicy"}}}, nil},
		{"bindsToNode only", func(s *resourceapi.ResourceSlice) {
			for i := range s.Spec.Devices {
				s.Spec.Devices[i].BindsToNode = nil
			}
		}, []draplugin.DroppedFeature{{Feature: fBind, Fields: []string{"spec.devices[0].bindsToNode"}}}, nil},
		{"shared counters only", func(s *resourceapi.ResourceSlice) { s.Spec.SharedCounters = nil },
			[]draplugin.DroppedFeature{{Feature: fPart, Fields: []string{"spec.sharedCounters"}}}, nil},
		{"one counter of a consumption", func(s *resourceapi.ResourceSlice) {
			for i := range s.Spec.Devices {
				for j := range s.Spec.Devices[i].ConsumesCounters {
					s.Spec.Devices[i].ConsumesCounters[j].Counters = nil
				}
			}
		}, []draplugin.DroppedFeature{{Feature: fPart, Fields: []string{"spec.devices[0].consumesCounters[0].counters"}}}, nil},
		{"a field of no feature", func(s *resourceapi.ResourceSlice) {
			for i := range s.Spec.Devices {
				delete(s.Spec.Devices[i].Capacity, "memory")
			}
		}, nil, []string{"spec.devices[0].capacity"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := draplugintest.NewAPIClient(nil)
			dropOnDryRun(client, tc.edit)
			got, err := draplugin.NegotiateFeatures(context.Background(), client, gpudra.DefaultDriverName, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Dropped); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.other, got.OtherFields); diff != "" {
				t.Errorf("other dropped fields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNegotiateFeaturesProbesAsTheAPIServerValidates checks the probe slices against rules the
// v1.37 API server enforces: a slice names its node (the chart's admission policy allows a
// plugin only its node's slices), shared counters sit in a slice without devices, and
// bindingConditions come with bindingFailureConditions; the dry runs name no object that
// could collide (generateName) and ask for DryRun All.
func TestNegotiateFeaturesProbesAsTheAPIServerValidates(t *testing.T) {
	client := draplugintest.NewAPIClient(nil)
	var sent []*resourceapi.ResourceSlice
	client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateActionImpl)
		if diff := cmp.Diff([]string{metav1.DryRunAll}, ca.CreateOptions.DryRun); diff != "" {
			t.Errorf("create options DryRun (-want +got):\n%s", diff)
		}
		sent = append(sent, ca.GetObject().(*resourceapi.ResourceSlice).DeepCopy())
		return false, nil, nil
	})
	if _, err := draplugin.NegotiateFeatures(context.Background(), client, "gpu.example.com", "worker-7"); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 2 {
		t.Fatalf("%d probe slices sent, want 2 (counters, devices)", len(sent))
	}
	for i, s := range sent {
		if s.Name != "" || !strings.HasPrefix(s.GenerateName, "worker-7-gpu.example.com-") {
			t.Errorf("probe %d: name %q generateName %q, want only a generateName for the node and driver", i, s.Name, s.GenerateName)
		}
		if s.Spec.Driver != "gpu.example.com" || s.Spec.NodeName == nil || *s.Spec.NodeName != "worker-7" || s.Spec.Pool.Name == "worker-7" {
			t.Errorf("probe %d: driver %q node %v pool %q, want the driver, the node and a pool of its own", i, s.Spec.Driver, s.Spec.NodeName, s.Spec.Pool.Name)
		}
		if len(s.Spec.SharedCounters) > 0 && len(s.Spec.Devices) > 0 {
			t.Errorf("probe %d has shared counters and devices; the API allows one of them per slice", i)
		}
		for _, d := range s.Spec.Devices {
			if (len(d.BindingConditions) == 0) != (len(d.BindingFailureConditions) == 0) {
				t.Errorf("probe %d device %s: bindingConditions and bindingFailureConditions must come together", i, d.Name)
			}
		}
	}
}

// TestNegotiateFeaturesErrors: what retrying cannot change is returned at once, transient
// failures are retried, and each error says what failed.
func TestNegotiateFeaturesErrors(t *testing.T) {
	gr := schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}
	unavailable := apierrors.NewServiceUnavailable("etcd is away")
	cases := []struct {
		name       string
		client     func(tries *atomic.Int32) *fake.Clientset
		driver     string
		node       string
		wantTries  int32
		wantErr    string
		wantIs     error
		wantResult bool
	}{
		{name: "not served", client: func(*atomic.Int32) *fake.Clientset {
			c := draplugintest.NewAPIClient(nil)
			c.Resources = nil
			return c
		}, wantErr: "does not serve resource.k8s.io/v1 ResourceSlices", wantIs: draplugin.ErrResourceSlicesNotServed},
		{name: "group without resourceslices", client: func(*atomic.Int32) *fake.Clientset {
			c := draplugintest.NewAPIClient(nil)
			c.Resources[0].APIResources = c.Resources[0].APIResources[1:]
			return c
		}, wantErr: "does not serve", wantIs: draplugin.ErrResourceSlicesNotServed},
		{name: "forbidden", client: func(tries *atomic.Int32) *fake.Clientset {
			return failing(tries, apierrors.NewForbidden(gr, "", errors.New("no create")), 100)
		}, wantTries: 1, wantErr: "dry-run create of probe ResourceSlice node-1-gpu.nvidia.com-feature-probe- for node node-1: resourceslices.resource.k8s.io is forbidden"},
		{name: "invalid", client: func(tries *atomic.Int32) *fake.Clientset {
			return failing(tries, apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceSlice"}, "x", nil), 100)
		}, wantTries: 1, wantErr: "is invalid"},
		{name: "transient then fine", client: func(tries *atomic.Int32) *fake.Clientset {
			return failing(tries, unavailable, 2)
		}, wantTries: 4, wantResult: true}, // two failed tries, then both probes
		{name: "transient for good", client: func(tries *atomic.Int32) *fake.Clientset {
			return failing(tries, unavailable, 100)
		}, wantTries: 3, wantErr: "(gave up after 3 tries): dry-run create", wantIs: unavailable},
		{name: "discovery fails transiently", client: func(tries *atomic.Int32) *fake.Clientset {
			c := draplugintest.NewAPIClient(nil)
			c.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
				tries.Add(1)
				return true, nil, unavailable
			})
			return c
		}, wantTries: 3, wantErr: "discover resource.k8s.io/v1", wantIs: unavailable},
		{name: "bad driver name", driver: "GPU_driver", wantErr: "driver name \"GPU_driver\""},
		{name: "bad node name", node: "Node_1", wantErr: "Node_1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tries atomic.Int32
			client := draplugintest.NewAPIClient(nil)
			if tc.client != nil {
				client = tc.client(&tries)
			}
			driver, node := cmpOr(tc.driver, gpudra.DefaultDriverName), cmpOr(tc.node, "node-1")
			got, err := draplugin.NegotiateFeatures(context.Background(), client, driver, node, fastBackoff(3))
			if tc.wantResult {
				if err != nil || len(got.Kept) != 4 {
					t.Fatalf("NegotiateFeatures = %+v, %v; want every feature kept", got, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v does not wrap %v", err, tc.wantIs)
			}
			if tries.Load() != tc.wantTries {
				t.Errorf("%d tries, want %d", tries.Load(), tc.wantTries)
			}
		})
	}
	t.Run("nil client", func(t *testing.T) {
		if _, err := draplugin.NegotiateFeatures(context.Background(), nil, gpudra.DefaultDriverName, "node-1"); err == nil || !strings.Contains(err.Error(), "nil") {
			t.Errorf("error %v, want one about the nil client", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var tries atomic.Int32
		_, err := draplugin.NegotiateFeatures(ctx, failing(&tries, unavailable, 100), gpudra.DefaultDriverName, "node-1")
		if err == nil {
			t.Fatal("no error from a cancelled negotiation")
		}
	})
}

// failing is an API client whose first n ResourceSlice creates fail with err; tries counts
// every create.
func failing(tries *atomic.Int32, err error, n int32) *fake.Clientset {
	c := draplugintest.NewAPIClient(nil)
	c.PrependReactor("create", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if tries.Add(1) <= n {
			return true, nil, err
		}
		return false, nil, nil
	})
	return c
}

func ExampleNegotiateFeatures() {
	// A fake API server with DRAPartitionableDevices off, as --feature-gates would turn it off.
	client := draplugintest.NewAPIClient([]gpudra.Feature{gpudra.FeaturePartitionableDevices})
	features, err := draplugin.NegotiateFeatures(context.Background(), client, gpudra.DefaultDriverName, "node-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("kept:", features.Kept)
	for _, d := range features.Dropped {
		fmt.Println("dropped:", d.Feature, d.Fields)
	}
	// Give it to draplugin.New (Config.APIFeatures): dynamic MIG is then off.
	// Output:
	// kept: [DRAConsumableCapacity DRADeviceTaints DRADeviceBindingConditions]
	// dropped: DRAPartitionableDevices [spec.sharedCounters spec.devices[0].consumesCounters]
}
