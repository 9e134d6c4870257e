package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkStartToSlices measures, per op, how long a node takes from the start of
// `gpu-dra-driver serve` (the chart's arguments, a fresh Node object and state directory, a
// fake DGX A100 40GB) until its complete pool is visible through the API server: process
// start, NVML enumeration, the ResourceSlice feature negotiation (two dry-run creates),
// reconciliation, kubelet registration and the publish. A goroutine lists the node's slices
// every 10 ms from before the Node object is created, so the figure is an upper bound by at most
// 10 ms plus one list call. Reported: median and maximum, in ms (issue 17's goal: ≤ 1 s).
func BenchmarkStartToSlices(b *testing.B) {
	ctx := context.Background()
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("start-%d", i)
		start := time.Now()
		visible := make(chan time.Duration, 1)
		go func() {
			for ctx.Err() == nil {
				if got, err := suite.Slices(ctx, name); err == nil {
					if pool, _ := completePool(got); pool != nil {
						visible <- time.Since(start)
						return
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		suite.StartNode(b, NodeSpec{Name: name, Machine: "dgx-a100-40gb", NoWaitForSlices: true})
		select {
		case d := <-visible:
			took = append(took, d)
		case <-time.After(time.Minute):
			b.Fatalf("node %s: its pool was not visible a minute after serve started", name)
		}
	}
	slices.Sort(took)
	b.ReportMetric(ms(took[len(took)/2]), "start-to-slices-p50-ms")
	b.ReportMetric(ms(took[len(took)-1]), "start-to-slices-max-ms")
}
