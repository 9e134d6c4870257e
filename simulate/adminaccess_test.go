package simulate_test

import (
	"context"
	"errors"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

// TestAdminAccessHoldsNothing: as in the scheduler (its allocated-devices bookkeeping skips
// admin-access results), an admin-access allocation neither keeps a device from workloads nor,
// released, frees a device a workload holds.
func TestAdminAccessHoldsNothing(t *testing.T) {
	m, err := gputest.New("l4x8")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	b := gpudra.NewBuilder()
	pool, err := b.Build("node-1", inv)
	if err != nil {
		t.Fatal(err)
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), "node-1", pool)
	if err != nil {
		t.Fatal(err)
	}
	sim := simulate.New("node-1", selectors.DeviceClasses(""), slices)
	claim := func(n int, admin bool) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: uid(n)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpudra.GPUDeviceClassName, AdminAccess: ptr.To(admin),
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
						Expression: "device.attributes['gpu.nvidia.com'].index == 0"}}}}}}}}}
	}
	ctx := context.Background()
	admin, err := sim.Allocate(ctx, claim(1, true))
	if err != nil {
		t.Fatal(err)
	}
	work, err := sim.Allocate(ctx, claim(2, false))
	if err != nil {
		t.Fatalf("workload after an admin-access claim on the same GPU: %v", err)
	}
	sim.Release(admin)
	if _, err := sim.Allocate(ctx, claim(3, false)); !errors.Is(err, simulate.ErrUnschedulable) {
		t.Errorf("second workload on the GPU the first holds, after the admin claim's release: %v, want unschedulable", err)
	}
	sim.Release(work)
	if _, err := sim.Allocate(ctx, claim(4, false)); err != nil {
		t.Errorf("workload after the first is released: %v", err)
	}
}
