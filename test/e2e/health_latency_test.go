package e2e

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

var healthSamples = flag.Int("health.samples", 20, "XIDs injected by TestXIDToTaintLatency (its figure in docs/benchmarks.md uses 200)")

// TestXIDToTaintLatency injects an XID into a running driver's fake machine, over and over,
// and times how long it takes until the API server serves the slice with the device tainted
// (seen through a watch), and from MarkHealthy until the taint is gone. It fails when a taint
// never comes or never goes; the times are logged (median, p99), not asserted: the figure in
// docs/benchmarks.md comes from `make e2e E2E_RUN=TestXIDToTaintLatency E2E_ARGS=-health.samples=200`.
func TestXIDToTaintLatency(t *testing.T) {
	ctx := context.Background()
	n := suite.StartNode(t, NodeSpec{Name: "xid-latency", Machine: "l4x8"})
	if _, err := WaitForPool(ctx, n.Spec.Name); err != nil {
		t.Fatal(err)
	}
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: n.Spec.Name, resourceapi.ResourceSliceSelectorDriver: driverName}.AsSelector().String()
	w, err := suite.Client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var taint, untaint []time.Duration
	for i := range *healthSamples {
		gpu := i % 8
		dev := fmt.Sprintf("gpu-%d", gpu)
		start := time.Now()
		if err := n.InjectXID(ctx, gpu, 79); err != nil {
			t.Fatal(err)
		}
		if err := waitTaintEvent(w, dev, true); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		taint = append(taint, time.Since(start))
		start = time.Now()
		if err := n.MarkHealthy(ctx, gpu); err != nil {
			t.Fatal(err)
		}
		if err := waitTaintEvent(w, dev, false); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		untaint = append(untaint, time.Since(start))
	}
	t.Logf("XID → taint in the served slice: %s", quantiles(taint))
	t.Logf("MarkHealthy → taint gone:        %s", quantiles(untaint))
}

// waitTaintEvent reads slice events until device dev has a health taint (tainted) or none.
func waitTaintEvent(w watch.Interface, dev string, tainted bool) error {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case <-timeout:
			return fmt.Errorf("device %s: health taint present=%v never reached", dev, tainted)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("slice watch closed")
			}
			s, ok := ev.Object.(*resourceapi.ResourceSlice)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			for _, d := range s.Spec.Devices {
				if d.Name != dev {
					continue
				}
				has := slices.ContainsFunc(d.Taints, func(t resourceapi.DeviceTaint) bool { return strings.HasPrefix(t.Key, driverName+"/") })
				if has == tainted {
					return nil
				}
			}
		}
	}
}

// quantiles formats the median, p99 and maximum of ds.
func quantiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d median %v p99 %v max %v", len(s), q(0.5).Round(time.Millisecond/10), q(0.99).Round(time.Millisecond/10), s[len(s)-1].Round(time.Millisecond/10))
}
