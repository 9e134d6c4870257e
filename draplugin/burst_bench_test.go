package draplugin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
)

// BenchmarkPrepareBurst prepares 100 distinct claims back to back, each 2Gi of a DGX H100 GPU's
// memory (consumable capacity, so MPS shares: the first claim on a GPU starts its MPS daemon,
// the others join it), then unprepares them; in process, without the DRA socket or an API
// server (BenchmarkPrepareLatency in test/e2e measures the same through both). The checkpoint
// holds up to 100 claims, so each write costs more than with one. Reported: the wall time of
// the 100 prepares.
func BenchmarkPrepareBurst(b *testing.B) {
	e := newEnvWith(b, "dgx-h100", draplugintest.WithSliceOptions(gpudra.WithConsumableMemory(gpudra.ConsumableMemory{})))
	p := e.plugin()
	var cs []*resourceapi.ResourceClaim
	for i := range 100 {
		c := draplugintest.Claim(fmt.Sprintf("b-%d", i), gpudra.GPUDeviceClassName, "", "")
		c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			gpudra.CapMemory: resource.MustParse("2Gi")}}
		a, err := e.Allocate(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		cs = append(cs, a)
	}
	for b.Loop() {
		start := time.Now()
		for _, c := range cs {
			if _, err := prepareOne(b, p, c); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/burst")
		for _, c := range cs {
			if err := unprepareOne(b, p, c); err != nil {
				b.Fatal(err)
			}
		}
	}
}
