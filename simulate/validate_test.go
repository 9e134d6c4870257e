package simulate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/simulate"
)

// oneGPU is a simulator with one device of driver gpu.example.com and the class "gpu".
func oneGPU() *simulate.Simulator {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: "device.driver == 'gpu.example.com'"}}}}}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpu.example.com", NodeName: ptr.To("node-1"),
		Pool:    resourceapi.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0"}},
	}}
	return simulate.New("node-1", []*resourceapi.DeviceClass{class}, []*resourceapi.ResourceSlice{slice})
}

func claimWith(reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}}
}

func exactly(mode resourceapi.DeviceAllocationMode, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: mode, Count: count}}
}

// TestAllocateRefusesInvalidRequests: requests the API server refuses (and counts no allocation
// can hold) are errors naming the field, never a panic in the allocator (count -3 was
// "makeslice: cap out of range").
func TestAllocateRefusesInvalidRequests(t *testing.T) {
	sub := func(count int64) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: "r", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "s", DeviceClassName: "gpu", Count: count}}}
	}
	cases := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string // "" for allocated, "unschedulable" for ErrUnschedulable
	}{
		{"count 1", claimWith(exactly("", 1)), ""},
		{"count 0 defaults to 1", claimWith(exactly("", 0)), ""},
		{"count -3", claimWith(exactly("", -3)), "claim default/c: spec.devices.requests[0].exactly.count: Invalid value: -3: must be greater than zero"},
		{"count min int64", claimWith(exactly("", -1<<63)), "must be greater than zero"},
		{"count 33", claimWith(exactly("", 33)), "spec.devices.requests[0].exactly.count: Invalid value: 33: an allocation holds at most 32 devices"},
		{"count max int64", claimWith(exactly("", 1<<63-1)), "an allocation holds at most 32 devices"},
		{"count 2 of 1", claimWith(exactly("", 2)), "unschedulable"},
		{"All with count", claimWith(exactly(resourceapi.DeviceAllocationModeAll, 2)), "count: Invalid value: 2: must not be set when allocationMode is All"},
		{"unknown mode", claimWith(exactly("Some", 1)), `allocationMode: Unsupported value: "Some"`},
		{"neither", claimWith(resourceapi.DeviceRequest{Name: "r"}), `spec.devices.requests[0] ("r"): Required value: exactly or firstAvailable`},
		{"both", claimWith(resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"},
			FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "s", DeviceClassName: "gpu"}}}), "mutually exclusive"},
		{"subrequest count -1", claimWith(sub(-1)), "spec.devices.requests[0].firstAvailable[0].count: Invalid value: -1: must be greater than zero"},
		{"subrequest count 1", claimWith(sub(1)), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := oneGPU().Allocate(context.Background(), c.claim)
			got := ""
			switch {
			case errors.Is(err, simulate.ErrUnschedulable):
				got = "unschedulable"
			case err != nil:
				got = err.Error()
			}
			if c.want == "" || c.want == "unschedulable" {
				if diff := cmp.Diff(c.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			if !strings.Contains(got, c.want) {
				t.Errorf("error %q, want one containing %q", got, c.want)
			}
		})
	}
}

// FuzzAllocate feeds manifests through LoadWorkload and every claim through Allocate: errors
// are fine, panics are not.
func FuzzAllocate(f *testing.F) {
	for _, count := range []string{"1", "0", "-3", "33", "9223372036854775807"} {
		f.Add("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n    requests:\n" +
			"    - name: r\n      exactly: {deviceClassName: gpu, count: " + count + "}\n")
	}
	f.Add("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n    requests:\n" +
		"    - name: r\n      firstAvailable: [{name: a, deviceClassName: gpu, allocationMode: All}]\n")
	f.Fuzz(func(t *testing.T, manifest string) {
		w, err := simulate.LoadWorkload([]byte(manifest), simulate.SequentialUID)
		if err != nil {
			return
		}
		sim := oneGPU()
		for _, c := range w.Claims {
			_, _ = sim.Allocate(context.Background(), c)
		}
	})
}

// TestAllocateNamesTheClaimOnce: the allocator's CEL errors already name the claim; Allocate
// must not name it a second time ("claim default/c: claim default/c: selector #0 ...").
func TestAllocateNamesTheClaimOnce(t *testing.T) {
	req := exactly(resourceapi.DeviceAllocationModeExactCount, 1)
	req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: "device.attributes['gpu.example.com'].missing == 'x'"}}}
	_, err := oneGPU().Allocate(context.Background(), claimWith(req))
	if err == nil {
		t.Fatal("Allocate succeeded, want the CEL runtime error")
	}
	if n := strings.Count(err.Error(), "claim default/c"); n != 1 || !strings.HasPrefix(err.Error(), "claim default/c: ") || !strings.Contains(err.Error(), "no such key: missing") {
		t.Errorf("Allocate = %q, want the claim named once, first, and the CEL error", err)
	}
}
