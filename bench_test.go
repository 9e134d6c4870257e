package gpudra_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/simulate"
)

func BenchmarkBuildSlices(b *testing.B) {
	cases := []struct {
		name    string
		machine string
		mopts   []gputest.Option
		bopts   []gpudra.Option
	}{
		{"dgx-h100/full", "dgx-h100", nil, nil},
		{"dgx-a100/static-mig", "dgx-a100-40gb", opts(balanced40), nil},
		{"dgx-h100/dynamic-mig", "dgx-h100", nil, dynamic},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			inv := inventory(b, c.machine, c.mopts...)
			bld := gpudra.NewBuilder(c.bopts...)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bld.Build(testNode, inv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// clusterSlices publishes the same machine as n nodes.
func clusterSlices(b *testing.B, inv *gpu.Inventory, n int, opts ...gpudra.Option) []*resourceapi.ResourceSlice {
	bld := gpudra.NewBuilder(opts...)
	var all []*resourceapi.ResourceSlice
	for i := 0; i < n; i++ {
		node := fmt.Sprintf("node-%d", i)
		res, err := bld.Build(node, inv)
		if err != nil {
			b.Fatal(err)
		}
		s, err := gpudra.ResourceSlices(bld.DriverName(), node, res)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, s...)
	}
	return all
}

func benchClaim(n int, class, profile string) *resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	if profile != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes['gpu.nvidia.com'].profile == '%s'", profile)}}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", n), Namespace: "bench", UID: types.UID(testUID(n))},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}},
	}
}

// BenchmarkAllocate measures the scheduler's allocator on our slices: one claim allocated per
// iteration on the next node (round robin) of a cluster of 100 or 500 8-GPU nodes, with all
// nodes' slices given to the allocator as the scheduler does. A node that is full starts over.
func BenchmarkAllocate(b *testing.B) {
	layouts := []struct {
		name    string
		machine string
		mopts   []gputest.Option
		bopts   []gpudra.Option
		class   string
		profile string
	}{
		{"full-gpu", "dgx-a100-40gb", nil, nil, gpudra.GPUDeviceClassName, ""},
		{"static-mig", "dgx-a100-40gb", opts(balanced40), nil, gpudra.MIGDeviceClassName, "1g.5gb"},
		// Static MIG grouped by profile (issue 33), and what a claim for the largest profile pays.
		{"static-mig-by-profile", "dgx-a100-40gb", opts(balanced40), []gpudra.Option{gpudra.WithMIGDevicesByProfile()}, gpudra.MIGDeviceClassName, "1g.5gb"},
		{"static-mig-3g", "dgx-a100-40gb", opts(balanced40), nil, gpudra.MIGDeviceClassName, "3g.20gb"},
		{"static-mig-by-profile-3g", "dgx-a100-40gb", opts(balanced40), []gpudra.Option{gpudra.WithMIGDevicesByProfile()}, gpudra.MIGDeviceClassName, "3g.20gb"},
		{"dynamic-mig", "dgx-a100-40gb", nil, dynamic, gpudra.MIGDeviceClassName, "1g.5gb"},
		// The same with only four profiles published (14 devices per GPU instead of 26).
		{"dynamic-mig-4-profiles", "dgx-a100-40gb", nil,
			append(dynamic, gpudra.WithDynamicMIGProfiles("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")),
			gpudra.MIGDeviceClassName, "1g.5gb"},
		// The driver-side publishing options of issue 33, and what a full-GPU claim pays for
		// them on the same nodes.
		{"dynamic-mig-partitions-first", "dgx-a100-40gb", nil, append(dynamic, gpudra.WithPartitionsFirst()), gpudra.MIGDeviceClassName, "1g.5gb"},
		{"dynamic-mig-one-me", "dgx-a100-40gb", nil, append(dynamic, gpudra.WithOneMediaExtensionPlacement()), gpudra.MIGDeviceClassName, "1g.5gb"},
		{"dynamic-mig-both", "dgx-a100-40gb", nil, append(dynamic, gpudra.WithPartitionsFirst(), gpudra.WithOneMediaExtensionPlacement()), gpudra.MIGDeviceClassName, "1g.5gb"},
		{"dynamic-full-gpu", "dgx-a100-40gb", nil, dynamic, gpudra.GPUDeviceClassName, ""},
		{"dynamic-full-gpu-partitions-first", "dgx-a100-40gb", nil, append(dynamic, gpudra.WithPartitionsFirst()), gpudra.GPUDeviceClassName, ""},
	}
	for _, nodes := range []int{100, 500} {
		for _, l := range layouts {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, l.name), func(b *testing.B) {
				inv := inventory(b, l.machine, l.mopts...)
				slices := clusterSlices(b, inv, nodes, l.bopts...)
				classes := selectors.DeviceClasses("")
				sims := make([]*simulate.Simulator, nodes)
				reset := func(i int) {
					sims[i] = simulate.New(fmt.Sprintf("node-%d", i), classes, slices)
				}
				for i := range sims {
					reset(i)
				}
				ctx := context.Background()
				n := 0
				b.ReportAllocs()
				for b.Loop() {
					i := n % nodes
					_, err := sims[i].Allocate(ctx, benchClaim(n, l.class, l.profile))
					if errors.Is(err, simulate.ErrUnschedulable) {
						reset(i)
						_, err = sims[i].Allocate(ctx, benchClaim(n, l.class, l.profile))
					}
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
			})
		}
	}
}
