package draplugin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
)

// BenchmarkPrepareGRPC measures NodePrepareResources through the plugin's DRA socket, as kubelet
// calls it (the helper's claim GET on a fake API client included), for an exclusive GPU and for
// a dynamic MIG device that is created on each prepare. Checkpoint and CDI writes are fsynced to
// the test's temporary directory. Each iteration prepares the claim from scratch; the unprepare
// that follows is not timed. Reported: median and p99 latency.
func BenchmarkPrepareGRPC(b *testing.B) {
	cases := []struct {
		name  string
		claim func(e *env) *resourceapi.ResourceClaim
	}{
		{"exclusive-gpu", func(e *env) *resourceapi.ResourceClaim {
			return e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), "")
		}},
		{"dynamic-mig-1g.5gb", func(e *env) *resourceapi.ResourceClaim {
			return e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), "")
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, "dgx-a100-40gb", true)
			c := tc.claim(e)
			p := e.plugin(withHealth(draplugin.HealthConfig{Disabled: true}))
			srv := serve(b, e, p, c)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				resp, err := srv.Prepare(ctx, c)
				lat = append(lat, time.Since(start))
				if err != nil || resp.Claims[string(c.UID)].GetError() != "" {
					b.Fatalf("prepare: %v %v", err, resp)
				}
				b.StopTimer()
				if _, err := srv.Unprepare(ctx, c); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
