package draplugin_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/simulate"
)

// Admin access (KEP-5018, GA in 1.36) and prioritized lists (KEP-4816, GA in 1.36) through the
// scheduler's allocator: claims are allocated by draplugintest.Node.Allocate (package simulate,
// the structured allocator with the 1.37 features), never patched by hand.

// nodeState is what preparing a claim may change on the node: host settings (compute modes,
// time slices, MPS daemons, mounts), MIG instances and MIG mode.
type nodeState struct {
	Host      any
	Instances []string
	MIGMode   []bool
}

func (e *env) state() nodeState {
	st := nodeState{Host: e.Host.State(), Instances: e.MIGInstances()}
	for i := range e.Machine.NumGPUs() {
		st.MIGMode = append(st.MIGMode, e.Machine.MIGEnabled(i))
	}
	return st
}

// TestAdminAccessOnBusyDeviceReconfiguresNothing: a workload claim is prepared on a device with
// sharing (or a MIG instance); an admin-access claim that asks for that very device with a
// conflicting config of its own gets it from the allocator (admin access ignores that the device
// is in use), prepares (with a CDI spec for the device) and leaves every host setting, MIG
// instance and MIG mode as the workload set them, also when unprepared.
func TestAdminAccessOnBusyDeviceReconfiguresNothing(t *testing.T) {
	const shortSlice = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Short"}}}`
	const migMPS = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`
	cases := []struct {
		name           string
		dynamic        bool
		machine        []gputest.Option
		class, sel     string
		work, admin    string // opaque configs of the workload and the admin claim
		adminClass     string // "" means class
		adminSel       string // "" means sel
		wantAllocError bool
	}{
		{name: "time-sliced GPU, admin asks for MPS", class: gpudra.GPUDeviceClassName, sel: gpuIndex(1), work: timeSlicingConfig, admin: mpsConfig},
		{name: "MPS GPU, admin asks for a short time slice", class: gpudra.GPUDeviceClassName, sel: gpuIndex(2), work: mpsConfig, admin: shortSlice},
		{name: "static MIG device under MPS", machine: []gputest.Option{gputest.WithMIG(3, "3g.20gb", "3g.20gb")},
			class: gpudra.MIGDeviceClassName, sel: migProfileOn("3g.20gb", 3), work: migMPS, admin: migMPS},
		// On a dynamic-MIG node every device consumes its GPU's shared counters, and the
		// allocator (k8s.io/dynamic-resource-allocation v0.37.2) checks them for admin-access
		// requests too, so admin access cannot get an in-use whole GPU or partition there:
		// kubernetes/kubernetes#140729 (open). When that is fixed, these cases allocate and must
		// prepare without reconfiguring, like the ones above.
		{name: "whole GPU of a dynamic-MIG node", dynamic: true, class: gpudra.GPUDeviceClassName, sel: gpuIndex(4),
			work: timeSlicingConfig, admin: mpsConfig, wantAllocError: true},
		{name: "dynamic MIG partition in use", dynamic: true, class: gpudra.MIGDeviceClassName, sel: migProfileOn("7g.40gb", 5),
			work: migMPS, admin: migMPS, wantAllocError: true},
		{name: "whole GPU while a partition of it is in use", dynamic: true, class: gpudra.MIGDeviceClassName, sel: migProfileOn("1g.5gb", 6),
			adminClass: gpudra.GPUDeviceClassName, adminSel: gpuIndex(6), wantAllocError: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", tc.dynamic, tc.machine...)
			p := e.plugin()
			e.reconcile(p)
			work := e.claim(tc.class, tc.sel, tc.work)
			if _, err := prepareOne(t, p, work); err != nil {
				t.Fatal(err)
			}
			if err := e.Republish(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			before := e.state()
			adminClass, adminSel := cmpOr(tc.adminClass, tc.class), cmpOr(tc.adminSel, tc.sel)
			admin := draplugintest.Claim("admin", adminClass, adminSel, tc.admin)
			admin.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
			admin, err := e.Allocate(context.Background(), admin)
			if tc.wantAllocError {
				if !errors.Is(err, simulate.ErrUnschedulable) {
					t.Fatalf("admin access to %s: allocated %v, %v; want unschedulable", adminSel, admin, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, want := admin.Status.Allocation.Devices.Results[0], work.Status.Allocation.Devices.Results[0]
			if got.Device != want.Device || !ptr.Deref(got.AdminAccess, false) {
				t.Fatalf("admin claim got %s (adminAccess %v), want the workload's %s", got.Device, got.AdminAccess, want.Device)
			}
			devs, err := prepareOne(t, p, admin)
			if err != nil || len(devs) != 1 || len(devs[0].CDIDeviceIDs) != 1 {
				t.Fatalf("prepare the admin claim: %+v, %v", devs, err)
			}
			if diff := cmp.Diff(before, e.state()); diff != "" {
				t.Errorf("preparing the admin claim changed the node (-before +after):\n%s", diff)
			}
			if err := unprepareOne(t, p, admin); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, e.state()); diff != "" {
				t.Errorf("unpreparing the admin claim changed the node (-before +after):\n%s", diff)
			}
			if err := unprepareOne(t, p, work); err != nil {
				t.Fatal(err)
			}
			if err := e.HostClean(); err != nil {
				t.Error(err)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// prioritizedClaim has two requests: "gpu" asks for a whole GPU (subrequest "whole", whose
// selector is wholeSel) or else a 1g.10gb MIG device ("slice"); "extra" asks for a whole GPU.
// configs are its opaque config entries, each for the requests named (comma-separated).
func prioritizedClaim(name, wholeSel string, configs map[string]string) *resourceapi.ResourceClaim {
	c := draplugintest.Claim(name, gpudra.GPUDeviceClassName, "", "")
	c.Spec.Devices.Requests[0].Name = "extra"
	whole := resourceapi.DeviceSubRequest{Name: "whole", DeviceClassName: gpudra.GPUDeviceClassName}
	if wholeSel != "" {
		whole.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: wholeSel}}}
	}
	c.Spec.Devices.Requests = append([]resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{whole,
		{Name: "slice", DeviceClassName: gpudra.MIGDeviceClassName, Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}}},
	}}}, c.Spec.Devices.Requests...)
	for _, reqs := range slices.Sorted(maps.Keys(configs)) {
		c.Spec.Devices.Config = append(c.Spec.Devices.Config, resourceapi.DeviceClaimConfiguration{Requests: strings.Split(reqs, ","),
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: gpudra.DefaultDriverName, Parameters: runtime.RawExtension{Raw: []byte(configs[reqs])}}}})
	}
	return c
}

// TestPrioritizedListConfigByRequestName: a firstAvailable claim's opaque config entries apply
// to the allocated device by its "request/subrequest" name or by its parent request's name, and
// an entry that names the other subrequest (kept in the allocation because it also names another
// request) does not apply to it. The claim has a second request, so that the allocator keeps
// the entries' request names instead of turning them into "applies to all".
func TestPrioritizedListConfigByRequestName(t *testing.T) {
	const (
		migMPS    = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":30}}}`
		mps40     = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":40}}}`
		notOnA100 = "device.attributes['gpu.nvidia.com'].productName.contains('H100')"
	)
	cases := []struct {
		name     string
		wholeSel string
		configs  map[string]string
		// want is what each allocated request's device got: "timeslice 3", "mps 40", "none".
		want map[string]string
	}{
		{name: "whole GPU: its subrequest's entry, not the other subrequest's",
			configs: map[string]string{"gpu/whole": timeSlicingConfig, "gpu/slice,extra": mps40},
			want:    map[string]string{"gpu/whole": "timeslice 3", "extra": "mps 40"}},
		{name: "whole GPU: the parent request's entry",
			configs: map[string]string{"gpu": mps40, "extra": timeSlicingConfig},
			want:    map[string]string{"gpu/whole": "mps 40", "extra": "timeslice 3"}},
		{name: "MIG device: its subrequest's entry, not the other subrequest's", wholeSel: notOnA100,
			configs: map[string]string{"gpu/slice": migMPS, "gpu/whole,extra": timeSlicingConfig},
			want:    map[string]string{"gpu/slice": "mps 30", "extra": "timeslice 3"}},
		{name: "MIG device: the parent request's entry", wholeSel: notOnA100,
			configs: map[string]string{"gpu": migMPS},
			want:    map[string]string{"gpu/slice": "mps 30", "extra": "none"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-80gb", false, gputest.WithMIG(0, slices.Repeat([]string{"1g.10gb"}, 7)...))
			p := e.plugin()
			claim, err := e.Allocate(context.Background(), prioritizedClaim(fmt.Sprintf("prio-%d", i), tc.wholeSel, tc.configs))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := prepareOne(t, p, claim); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, e.sharingByRequest(claim)); diff != "" {
				t.Errorf("sharing per allocated request (-want +got):\n%s", diff)
			}
			if err := unprepareOne(t, p, claim); err != nil {
				t.Fatal(err)
			}
			if err := e.HostClean(); err != nil {
				t.Error(err)
			}
		})
	}
}

// sharingByRequest says, per allocation result of the claim, what the host set up for its
// device: "timeslice N" (the GPU's time slice), "mps P" (in the claim's MPS daemon, with active
// thread percentage P) or "none".
func (e *env) sharingByRequest(claim *resourceapi.ResourceClaim) map[string]string {
	uuids := map[string]string{}
	for _, g := range e.Inventory.GPUs {
		uuids[gpudra.GPUDeviceName(g.Minor)] = g.UUID
		for j := range g.MIGDevices {
			uuids[gpudra.MIGDeviceNameOf(&g.MIGDevices[j])] = g.MIGDevices[j].UUID
		}
	}
	st := e.Host.State()
	daemon := st.Daemons[string(claim.UID)]
	out := map[string]string{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		uuid := uuids[r.Device]
		switch {
		case slices.Contains(daemon.DeviceUUIDs, uuid):
			out[r.Request] = fmt.Sprintf("mps %d", ptr.Deref(daemon.ActiveThreadPercentage, 100))
		case st.TimeSlices[uuid] != 0:
			out[r.Request] = fmt.Sprintf("timeslice %d", st.TimeSlices[uuid])
		default:
			out[r.Request] = "none"
		}
	}
	return out
}
