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

// BenchmarkPrepareGRPC measures NodePrepareResources and NodeUnprepareResources through the
// plugin's DRA socket, as kubelet calls them (the helper's claim GET on a fake API client
// included), for an exclusive GPU and for a dynamic MIG device that is created on each prepare
// and destroyed on each unprepare. The checkpoint and the CDI specs go to the test's temporary
// directory (TMPDIR): put it on a disk file system to pay for real fsyncs. Each iteration
// prepares the claim from scratch and unprepares it; both are timed. Reported: median and p99
// latency of each.
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
			prep := make([]time.Duration, 0, b.N)
			unprep := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				resp, err := srv.Prepare(ctx, c)
				prep = append(prep, time.Since(start))
				if err != nil || resp.Claims[string(c.UID)].GetError() != "" {
					b.Fatalf("prepare: %v %v", err, resp)
				}
				start = time.Now()
				uresp, err := srv.Unprepare(ctx, c)
				unprep = append(unprep, time.Since(start))
				if err != nil || uresp.Claims[string(c.UID)].GetError() != "" {
					b.Fatalf("unprepare: %v %v", err, uresp)
				}
			}
			reportLatency(b, "prep", prep)
			reportLatency(b, "unprep", unprep)
		})
	}
}

// reportLatency reports the median and p99 of lat, in milliseconds, as name-p50-ms and name-p99-ms.
func reportLatency(b *testing.B, name string, lat []time.Duration) {
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), name+"-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), name+"-p99-ms")
}
