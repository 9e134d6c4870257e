package gpudra_test

import (
	"context"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra"
)

// BenchmarkPrepareGRPC measures NodePrepareResources through the plugin's DRA socket, as kubelet
// calls it (the helper's claim GET on a fake API client included), for an exclusive GPU and for
// a dynamic MIG device that is created on each prepare. Checkpoint and CDI writes are fsynced to
// the test's temporary directory. Each iteration prepares the claim from scratch; the unprepare
// that follows is not timed. Reported: median and p99 latency.
func BenchmarkPrepareGRPC(b *testing.B) {
	cases := []struct {
		name  string
		claim func(e *pluginEnv) *resourceapi.ResourceClaim
	}{
		{"exclusive-gpu", func(e *pluginEnv) *resourceapi.ResourceClaim {
			return e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), "")
		}},
		{"dynamic-mig-1g.5gb", func(e *pluginEnv) *resourceapi.ResourceClaim {
			return e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), "")
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			e := newPluginEnv(b, "dgx-a100-40gb", true)
			c := tc.claim(e)
			p := e.newPlugin(pluginOpts{health: gpudra.HealthConfig{Disabled: true}})
			dra, _ := startWithSockets(b, p, c)
			ctx := context.Background()
			req := &drapbv1.NodePrepareResourcesRequest{Claims: grpcClaims(c)}
			ureq := &drapbv1.NodeUnprepareResourcesRequest{Claims: grpcClaims(c)}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				resp, err := dra.NodePrepareResources(ctx, req)
				lat = append(lat, time.Since(start))
				if err != nil || resp.Claims[string(c.UID)].GetError() != "" {
					b.Fatalf("prepare: %v %v", err, resp)
				}
				b.StopTimer()
				if _, err := dra.NodeUnprepareResources(ctx, ureq); err != nil {
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
