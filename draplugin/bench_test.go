package draplugin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// BenchmarkPrepareGRPC measures NodePrepareResources and NodeUnprepareResources through the
// plugin's DRA socket, as kubelet calls them (the helper's claim GET on a fake API client
// included): one exclusive GPU, one dynamic MIG device (created on each prepare and destroyed on
// each unprepare), and eight exclusive GPUs in one call (prepared and unprepared concurrently,
// as kubelet sends the claims of a pod). The checkpoint and the CDI specs go to the test's
// temporary directory (TMPDIR): put it on a disk file system to pay for real fsyncs. Each
// iteration prepares the claims from scratch and unprepares them; both calls are timed.
// Reported: median and p99 latency of each call, and the fsyncs per call.
func BenchmarkPrepareGRPC(b *testing.B) {
	cases := []struct {
		name   string
		claims func(e *env) []*resourceapi.ResourceClaim
	}{
		{"exclusive-gpu", func(e *env) []*resourceapi.ResourceClaim {
			return []*resourceapi.ResourceClaim{e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), "")}
		}},
		{"dynamic-mig-1g.5gb", func(e *env) []*resourceapi.ResourceClaim {
			return []*resourceapi.ResourceClaim{e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), "")}
		}},
		{"8-exclusive-gpus-per-call", func(e *env) []*resourceapi.ResourceClaim {
			var cs []*resourceapi.ResourceClaim
			for i := range 8 {
				cs = append(cs, e.claim(gpudra.GPUDeviceClassName, gpuIndex(i), ""))
			}
			return cs
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, "dgx-a100-40gb", true)
			cs := tc.claims(e)
			w := newSyncWatch(e.StateDir)
			p := e.plugin(withHealth(draplugin.HealthConfig{Disabled: true}), withHooks(testhooks.Hooks{Synced: w.synced}))
			srv := serve(b, e, p, cs...)
			ctx := context.Background()
			prep := make([]time.Duration, 0, b.N)
			unprep := make([]time.Duration, 0, b.N)
			w.take()
			prepSyncs, unprepSyncs := 0, 0
			for b.Loop() {
				start := time.Now()
				resp, err := srv.Prepare(ctx, cs...)
				prep = append(prep, time.Since(start))
				prepSyncs += w.take()
				if err != nil {
					b.Fatalf("prepare: %v", err)
				}
				for _, c := range cs {
					if e := resp.Claims[string(c.UID)].GetError(); e != "" {
						b.Fatalf("prepare %s: %s", c.Name, e)
					}
				}
				start = time.Now()
				uresp, err := srv.Unprepare(ctx, cs...)
				unprep = append(unprep, time.Since(start))
				unprepSyncs += w.take()
				if err != nil {
					b.Fatalf("unprepare: %v", err)
				}
				for _, c := range cs {
					if e := uresp.Claims[string(c.UID)].GetError(); e != "" {
						b.Fatalf("unprepare %s: %s", c.Name, e)
					}
				}
			}
			reportLatency(b, "prep", prep)
			reportLatency(b, "unprep", unprep)
			b.ReportMetric(float64(prepSyncs)/float64(len(prep)), "prep-fsyncs/call")
			b.ReportMetric(float64(unprepSyncs)/float64(len(unprep)), "unprep-fsyncs/call")
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
