package gpudra_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// mixedStatic is a DGX A100 40GB with a different static MIG layout on each of its first four
// GPUs and MIG disabled on the others (full GPUs on the same node).
func mixedStatic() []gputest.Option {
	return []gputest.Option{
		gputest.WithMIG(0, "3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"),
		gputest.WithMIG(1, "7g.40gb"),
		gputest.WithMIG(2, "1g.10gb", "1g.10gb", "2g.10gb", "1g.5gb"),
		gputest.WithMIG(3, "4g.20gb", "3g.20gb"),
	}
}

func staticDevices(t *testing.T, machineOpts []gputest.Option, opts ...gpudra.Option) []resourceapi.Device {
	t.Helper()
	devs, err := gpudra.NewBuilder(opts...).Devices(inventory(t, "dgx-a100-40gb", machineOpts...))
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

func attrString(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// TestMIGDevicesByProfile: the same devices as by default; the full GPUs first, in their
// order; then the MIG devices, each profile's devices next to each other, the groups by
// published memory then multiprocessors, and within a group the order the devices had by
// default.
func TestMIGDevicesByProfile(t *testing.T) {
	for name, machineOpts := range map[string][]gputest.Option{
		"all-balanced": {gputest.WithMIGConfig("all-balanced")},
		"mixed":        mixedStatic(),
	} {
		t.Run(name, func(t *testing.T) {
			def := staticDevices(t, machineOpts)
			grouped := staticDevices(t, machineOpts, gpudra.WithMIGDevicesByProfile())
			if diff := cmp.Diff(byName(def), byName(grouped)); diff != "" {
				t.Fatalf("devices differ from the default order's (-default +grouped):\n%s", diff)
			}
			isMIG := func(d resourceapi.Device) bool { return attrString(d, gpudra.AttrType) == gpudra.DeviceTypeMIG }
			firstMIG := slices.IndexFunc(grouped, isMIG)
			if firstMIG < 0 || slices.ContainsFunc(grouped[firstMIG:], func(d resourceapi.Device) bool { return !isMIG(d) }) {
				t.Errorf("not every full GPU is before the MIG devices: %v", names(grouped))
			}
			namesOf := func(devs []resourceapi.Device, keep func(resourceapi.Device) bool) []string {
				var out []string
				for _, d := range devs {
					if keep(d) {
						out = append(out, d.Name)
					}
				}
				return out
			}
			notMIG := func(d resourceapi.Device) bool { return !isMIG(d) }
			if diff := cmp.Diff(namesOf(def, notMIG), namesOf(grouped, notMIG)); diff != "" {
				t.Errorf("full GPUs not in their default order (-default +grouped):\n%s", diff)
			}
			var profiles []string
			for i, d := range grouped[firstMIG:] {
				p := attrString(d, gpudra.AttrProfile)
				if len(profiles) > 0 && profiles[len(profiles)-1] == p {
					continue
				}
				if slices.Contains(profiles, p) {
					t.Errorf("profile %s is split: %v", p, names(grouped[firstMIG:]))
				}
				profiles = append(profiles, p)
				if i > 0 {
					if prev := grouped[firstMIG+i-1]; capacityKey(prev) > capacityKey(d) {
						t.Errorf("%s (%s) before %s (%s): want smaller profiles first", prev.Name, capacityKey(prev), d.Name, capacityKey(d))
					}
				}
			}
			for _, p := range profiles {
				ofProfile := func(d resourceapi.Device) bool { return attrString(d, gpudra.AttrProfile) == p }
				if diff := cmp.Diff(namesOf(def, ofProfile), namesOf(grouped, ofProfile)); diff != "" {
					t.Errorf("profile %s's devices not in their default order (-default +grouped):\n%s", p, diff)
				}
			}
		})
	}
}

// capacityKey orders devices by published memory, then multiprocessors (zero-padded, so that
// strings compare as the numbers do).
func capacityKey(d resourceapi.Device) string {
	mem := d.Capacity[gpudra.CapMemory].Value
	sms := d.Capacity[gpudra.CapMultiprocessors].Value
	return fmt.Sprintf("%020d/%06d", mem.Value(), sms.Value())
}

func names(devs []resourceapi.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Name
	}
	return out
}

// TestMIGDevicesByProfileAllocatesTheSame: claims that each select one profile get the same
// devices, one after another in a mixed sequence until the node is full, from the real
// allocator with and without the option; a claim for any MIG device gets the smallest free one
// with it.
func TestMIGDevicesByProfileAllocatesTheSame(t *testing.T) {
	inv := inventory(t, "dgx-a100-40gb", mixedStatic()...)
	def := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, inv))
	grouped := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, inv, gpudra.WithMIGDevicesByProfile()))
	sequence := []string{"3g.20gb", "1g.5gb", "2g.10gb", "1g.10gb", "1g.5gb", "7g.40gb", "4g.20gb", "2g.10gb", "1g.5gb", "3g.20gb", "1g.10gb"}
	allocated := 0
	for round := 0; ; round++ {
		progress := false
		for i, p := range sequence {
			n := round*len(sequence) + i
			got, errGrouped := grouped.Allocate(context.Background(), migClaim(n, p))
			want, errDef := def.Allocate(context.Background(), migClaim(n, p))
			if (errDef == nil) != (errGrouped == nil) {
				t.Fatalf("claim %d (%s): default order: %v, grouped: %v", n, p, errDef, errGrouped)
			}
			if errDef != nil {
				if !errors.Is(errDef, simulate.ErrUnschedulable) {
					t.Fatalf("claim %d (%s): %v", n, p, errDef)
				}
				continue
			}
			progress = true
			allocated++
			if diff := cmp.Diff(want.Status.Allocation.Devices.Results, got.Status.Allocation.Devices.Results); diff != "" {
				t.Errorf("claim %d (%s): allocation differs (-default +grouped):\n%s", n, p, diff)
			}
		}
		if !progress {
			break
		}
	}
	if want := 4 + 1 + 4 + 2; allocated != want {
		t.Errorf("%d claims allocated, want one per MIG device of the layout (%d)", allocated, want)
	}

	fresh := simulate.New(testNode, selectors.DeviceClasses(""), slicesFor(t, inv, gpudra.WithMIGDevicesByProfile()))
	anyMIG := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "any", Namespace: "default", UID: types.UID(testUID(1000))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpudra.MIGDeviceClassName},
		}}}},
	}
	got, err := fresh.Allocate(context.Background(), anyMIG)
	if err != nil {
		t.Fatal(err)
	}
	if dev := got.Status.Allocation.Devices.Results[0].Device; !strings.Contains(dev, "-mig-1g5gb-") {
		t.Errorf("a claim for any MIG device got %s, want a 1g.5gb device (the smallest)", dev)
	}
}

// TestMIGDevicesByProfileWithDynamicMIG: the option orders static MIG devices only; with
// dynamic MIG the builder refuses it.
func TestMIGDevicesByProfileWithDynamicMIG(t *testing.T) {
	_, err := gpudra.NewBuilder(gpudra.WithDynamicMIG(nil), gpudra.WithMIGDevicesByProfile()).Devices(inventory(t, "dgx-a100-40gb"))
	if err == nil || !strings.Contains(err.Error(), "WithMIGDevicesByProfile") || !strings.Contains(err.Error(), "WithDynamicMIG") {
		t.Errorf("WithDynamicMIG and WithMIGDevicesByProfile: %v, want an error naming both", err)
	}
}
