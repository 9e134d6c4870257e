package e2e

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

var (
	benchExample = flag.Bool("bench.example-driver", true,
		"run dra-example-driver beside serve (built into the e2e cache on first use)")
	benchConcurrency = flag.Int("bench.concurrency", 16, "claims in flight in the concurrent rows")
)

// burstSize is how many distinct claims a burst prepares back to back, as kubelet does when
// that many pods land on a node at once.
const burstSize = 100

// warmup cycles run untimed before each row: the first calls set up connections and caches.
const warmup = 5

// BenchmarkPrepareLatency plays kubelet against running drivers: `gpu-dra-driver serve` with
// the chart's arguments on fake machines, and dra-example-driver's kubelet plugin, both
// authenticated to the real API server with ServiceAccount tokens. Every claim is allocated by
// the real kube-scheduler for a pod pinned to the node; each op is one NodePrepareResources and
// one NodeUnprepareResources call over the plugin's DRA socket (registration and GetInfo done
// first, as kubelet does). Run with -benchtime Nx: N calls per row. At the end it prints a
// markdown table of medians and p99s, and the goals.
func BenchmarkPrepareLatency(b *testing.B) {
	ctx := context.Background()
	env := newBenchEnv(ctx, b)
	tab := &latencyTable{}
	// Each row starts once serve's device-status writes of the row before are done (they wait
	// for a quiet moment and would otherwise fall into the next row).
	run := func(name string, f func(b *testing.B)) {
		b.Run(name, f)
		waitStatusWritten(ctx, b)
	}
	run("exclusive", func(b *testing.B) {
		targets := []claimTarget{env.ours["excl"]}
		if env.ex != nil {
			targets = append(targets, env.ex.first())
		}
		tab.add(cycles(ctx, b, "exclusive GPU", targets...)...)
	})
	if env.exSlow != nil {
		run("exclusive-example-default-qps", func(b *testing.B) {
			tab.add(cycles(ctx, b, "exclusive GPU", env.exSlow.first())...)
		})
	}
	for _, c := range []struct{ bench, claim, label string }{
		{"time-slicing", "ts", "time-slicing (GpuConfig)"},
		{"mps", "mps", "MPS (GpuConfig)"},
		{"static-mig", "static", "static MIG 1g.5gb"},
		{"dynamic-mig", "dynamic", "dynamic MIG 1g.5gb (instance created and destroyed)"},
	} {
		run(c.bench, func(b *testing.B) { tab.add(cycles(ctx, b, c.label, env.ours[c.claim])...) })
	}
	for _, d := range env.bursty() {
		run("burst-100/"+d.bench, func(b *testing.B) { tab.add(burst(ctx, b, d)) })
	}
	for _, d := range env.bursty() {
		if d == env.exSlow {
			continue // 16 claims at 5 QPS: the rate limiter, not the driver
		}
		run(fmt.Sprintf("concurrent-%d/%s", *benchConcurrency, d.bench), func(b *testing.B) {
			tab.add(concurrent(ctx, b, d, *benchConcurrency))
		})
	}
	fmt.Print(tab.markdown())
}

// waitStatusWritten waits until no ResourceClaim carries a status.devices entry of serve's
// driver: every claim is unprepared at the end of a row, and serve has written that.
func waitStatusWritten(ctx context.Context, b *testing.B) {
	b.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		claims, err := suite.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range claims.Items {
			for _, d := range c.Status.Devices {
				if d.Driver == driverName {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		b.Fatalf("serve's device-status writes not done 30 s after the row: %v", err)
	}
}

// target is a registered plugin and claims allocated on its node.
type target struct {
	// bench names it in sub-benchmark names; driver describes it in the table.
	bench, driver string
	plugin        *fakekubelet.Plugin
	claims        []fakekubelet.Claim
	// devices are the devices the claims got, by index.
	devices []string
	// proc is the driver's process.
	proc *framework.Process
	// memory says what each claim of a consumable-memory burst asks for ("" for whole devices).
	memory string
}

// claimTarget is one claim of a target.
type claimTarget struct {
	*target
	claim fakekubelet.Claim
}

// first is the target's first claim.
func (t *target) first() claimTarget { return claimTarget{t, t.claims[0]} }

// prepare and unprepare make one call each and fail on any error, as kubelet would see it.
func (t *target) prepare(ctx context.Context, c fakekubelet.Claim) error {
	resp, err := t.plugin.Prepare(ctx, c)
	return fakekubelet.PrepareErrors(resp, err, c)
}

func (t *target) unprepare(ctx context.Context, c fakekubelet.Claim) error {
	resp, err := t.plugin.Unprepare(ctx, c)
	return fakekubelet.UnprepareErrors(resp, err, c)
}

// cpuTime is the CPU time the target's driver has used so far (zero where it cannot be read:
// the table then shows none).
func (t *target) cpuTime() time.Duration {
	u, _ := t.proc.Usage()
	return u.CPU
}

// timed returns how long f took.
func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

// cycles times prepare/unprepare cycles on each claim target, alternating between them within
// every op, so that the machine's load falls on all of them alike.
func cycles(ctx context.Context, b *testing.B, label string, targets ...claimTarget) []*latencyRow {
	rows := make([]*latencyRow, len(targets))
	for i, t := range targets {
		rows[i] = &latencyRow{claim: label, driver: t.driver}
		for range warmup {
			if err := t.prepare(ctx, t.claim); err != nil {
				b.Fatal(err)
			}
			if err := t.unprepare(ctx, t.claim); err != nil {
				b.Fatal(err)
			}
		}
	}
	cpu0 := make([]time.Duration, len(targets))
	for i, t := range targets {
		cpu0[i] = t.cpuTime()
	}
	for b.Loop() {
		for i, t := range targets {
			p, err := timed(func() error { return t.prepare(ctx, t.claim) })
			if err != nil {
				b.Fatalf("%s: %v", t.driver, err)
			}
			u, err := timed(func() error { return t.unprepare(ctx, t.claim) })
			if err != nil {
				b.Fatalf("%s: %v", t.driver, err)
			}
			rows[i].prepare, rows[i].unprepare = append(rows[i].prepare, p), append(rows[i].unprepare, u)
		}
	}
	for i, r := range rows {
		r.cpu = targets[i].cpuTime() - cpu0[i]
		r.report(b, len(rows) > 1)
	}
	return rows
}

// burst prepares the target's claims one after another without pause, burstSize distinct
// claims per burst, then unprepares them the same way; one op is one prepare. The row notes
// the median wall time of a whole burst.
func burst(ctx context.Context, b *testing.B, t *target) *latencyRow {
	if len(t.claims) < burstSize {
		b.Fatalf("%s: %d claims allocated, a burst needs %d", t.driver, len(t.claims), burstSize)
	}
	row := &latencyRow{claim: fmt.Sprintf("burst of %d distinct claims, back to back", burstSize), driver: t.driver}
	if t.memory != "" {
		row.claim += fmt.Sprintf(" (%s of a GPU each)", t.memory)
	}
	var walls []time.Duration
	var start time.Time
	i := 0
	cpu0 := t.cpuTime()
	for b.Loop() {
		k := i % burstSize
		if k == 0 {
			start = time.Now()
		}
		p, err := timed(func() error { return t.prepare(ctx, t.claims[k]) })
		if err != nil {
			b.Fatalf("%s: %v", t.driver, err)
		}
		row.prepare = append(row.prepare, p)
		i++
		if k == burstSize-1 {
			walls = append(walls, time.Since(start))
			if err := unprepareBurst(ctx, t, t.claims[:burstSize], row); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := unprepareBurst(ctx, t, t.claims[:i%burstSize], row); err != nil {
		b.Fatal(err)
	}
	row.cpu = t.cpuTime() - cpu0
	row.report(b, false)
	if len(walls) == 0 {
		row.note = fmt.Sprintf("no whole burst: run with -benchtime %dx or more", burstSize)
		return row
	}
	wall := percentile(walls, 0.5)
	b.ReportMetric(wall.Seconds(), "s/burst")
	row.burst = wall
	row.note = fmt.Sprintf("%d prepares back to back: **%s** (median of %d bursts)", burstSize, fmtSeconds(wall), len(walls))
	return row
}

func unprepareBurst(ctx context.Context, t *target, claims []fakekubelet.Claim, row *latencyRow) error {
	for _, c := range claims {
		u, err := timed(func() error { return t.unprepare(ctx, c) })
		if err != nil {
			return fmt.Errorf("%s: %w", t.driver, err)
		}
		row.unprepare = append(row.unprepare, u)
	}
	return nil
}

// concurrent runs prepare/unprepare cycles from n goroutines at once, each on its own claim,
// as kubelet's pod workers do; the row notes the cycles per second. The claims are spread over
// the devices they were allocated (shares of one GPU in a row, then the next GPU's).
func concurrent(ctx context.Context, b *testing.B, t *target, n int) *latencyRow {
	if len(t.claims) < n {
		b.Fatalf("%s: %d claims allocated, %d in flight need as many", t.driver, len(t.claims), n)
	}
	claims := spread(t.claims, t.devices)[:n]
	row := &latencyRow{claim: fmt.Sprintf("%d claims in flight (one goroutine each), on %d devices", n, distinct(claims, t)), driver: t.driver}
	var mu sync.Mutex
	var next atomic.Int64
	b.SetParallelism((n + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	start, cpu0 := time.Now(), t.cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		c := claims[int(next.Add(1)-1)%len(claims)]
		var prep, unprep []time.Duration
		for pb.Next() {
			p, err := timed(func() error { return t.prepare(ctx, c) })
			if err != nil {
				b.Errorf("%s: %v", t.driver, err)
				return
			}
			u, err := timed(func() error { return t.unprepare(ctx, c) })
			if err != nil {
				b.Errorf("%s: %v", t.driver, err)
				return
			}
			prep, unprep = append(prep, p), append(unprep, u)
		}
		mu.Lock()
		defer mu.Unlock()
		row.prepare, row.unprepare = append(row.prepare, prep...), append(row.unprepare, unprep...)
	})
	rate := float64(len(row.prepare)) / time.Since(start).Seconds()
	row.cpu = t.cpuTime() - cpu0
	row.report(b, false)
	b.ReportMetric(rate, "cycles/s")
	row.note = fmt.Sprintf("%.0f prepare+unprepare cycles/s", rate)
	return row
}

// spread orders claims round robin over their devices: the first claim of every device, then
// the second, and so on.
func spread(claims []fakekubelet.Claim, devices []string) []fakekubelet.Claim {
	var order []string
	byDevice := map[string][]fakekubelet.Claim{}
	for i, c := range claims {
		if _, ok := byDevice[devices[i]]; !ok {
			order = append(order, devices[i])
		}
		byDevice[devices[i]] = append(byDevice[devices[i]], c)
	}
	var out []fakekubelet.Claim
	for round := 0; len(out) < len(claims); round++ {
		for _, d := range order {
			if round < len(byDevice[d]) {
				out = append(out, byDevice[d][round])
			}
		}
	}
	return out
}

// distinct counts the devices of claims.
func distinct(claims []fakekubelet.Claim, t *target) int {
	devs := map[string]bool{}
	for _, c := range claims {
		devs[t.devices[slices.Index(t.claims, c)]] = true
	}
	return len(devs)
}

// latencyRow is one line of the table: the calls timed for one claim kind on one driver.
type latencyRow struct {
	claim, driver      string
	prepare, unprepare []time.Duration
	burst              time.Duration
	// cpu is the CPU time the driver used for all the row's calls.
	cpu  time.Duration
	note string
}

// cpuPerCycle is the driver's CPU time per prepare and unprepare, in milliseconds.
func (r *latencyRow) cpuPerCycle() float64 {
	if len(r.prepare) == 0 {
		return 0
	}
	return ms(r.cpu) / float64(len(r.prepare))
}

// report adds the row's medians and p99s to the benchmark's output; prefixed names them by
// driver when an op covers several.
func (r *latencyRow) report(b *testing.B, prefixed bool) {
	prefix := ""
	if prefixed {
		prefix = strings.Fields(r.driver)[0] + "-"
	}
	b.ReportMetric(ms(percentile(r.prepare, 0.5)), prefix+"prep-p50-ms")
	b.ReportMetric(ms(percentile(r.prepare, 0.99)), prefix+"prep-p99-ms")
	b.ReportMetric(ms(percentile(r.unprepare, 0.5)), prefix+"unprep-p50-ms")
	b.ReportMetric(ms(percentile(r.unprepare, 0.99)), prefix+"unprep-p99-ms")
	b.ReportMetric(r.cpuPerCycle(), prefix+"cpu-ms/cycle")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtMS(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f", ms(d))
	}
	return fmt.Sprintf("%.0f", ms(d))
}

func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// percentile is the nearest-rank percentile p (0 < p ≤ 1) of ds; zero for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// latencyTable collects rows; a sub-benchmark that runs more than once replaces its rows.
type latencyTable struct {
	mu   sync.Mutex
	rows []*latencyRow
}

func (t *latencyTable) add(rows ...*latencyRow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range rows {
		i := slices.IndexFunc(t.rows, func(o *latencyRow) bool { return o.claim == r.claim && o.driver == r.driver })
		if i >= 0 {
			t.rows[i] = r
		} else {
			t.rows = append(t.rows, r)
		}
	}
}

func (t *latencyTable) markdown() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	b.WriteString("\n| claim | driver (API client QPS/burst) | calls | prepare p50 / p99 ms | unprepare p50 / p99 ms | driver CPU ms per prepare+unprepare | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range t.rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %s / %s | %s / %s | %.1f | %s |\n", r.claim, r.driver, len(r.prepare),
			fmtMS(percentile(r.prepare, 0.5)), fmtMS(percentile(r.prepare, 0.99)),
			fmtMS(percentile(r.unprepare, 0.5)), fmtMS(percentile(r.unprepare, 0.99)), r.cpuPerCycle(), r.note)
	}
	b.WriteString(t.goals())
	return b.String()
}

// goals compares the rows with the goals: against the example driver at equal QPS,
// prepare median ≤ 1.0× (aim 0.7×) and unprepare median ≤ 1.0×; prepare p99 ≤ 5 ms; 100
// back-to-back prepares ≤ 0.5 s.
func (t *latencyTable) goals() string {
	find := func(claim, driverPrefix string) *latencyRow {
		for _, r := range t.rows {
			if strings.HasPrefix(r.claim, claim) && strings.HasPrefix(r.driver, driverPrefix) && strings.Contains(r.driver, equalQPS) {
				return r
			}
		}
		return nil
	}
	var b strings.Builder
	b.WriteString("\nGoals (issue 17):\n")
	ours, ex := find("exclusive GPU", oursName), find("exclusive GPU", exampleName)
	if ours != nil && ex != nil {
		fmt.Fprintf(&b, "- exclusive prepare median %s ms vs example driver %s ms at equal QPS: %.2f× (goal ≤ 1.0×, aim 0.7×)\n",
			fmtMS(percentile(ours.prepare, 0.5)), fmtMS(percentile(ex.prepare, 0.5)),
			float64(percentile(ours.prepare, 0.5))/float64(percentile(ex.prepare, 0.5)))
		fmt.Fprintf(&b, "- exclusive unprepare median %s ms vs %s ms: %.2f× (goal ≤ 1.0×)\n",
			fmtMS(percentile(ours.unprepare, 0.5)), fmtMS(percentile(ex.unprepare, 0.5)),
			float64(percentile(ours.unprepare, 0.5))/float64(percentile(ex.unprepare, 0.5)))
	}
	if ours != nil {
		fmt.Fprintf(&b, "- exclusive prepare p99 %s ms (goal ≤ 5 ms)\n", fmtMS(percentile(ours.prepare, 0.99)))
	}
	if r := find("burst", oursName); r != nil && r.burst > 0 {
		fmt.Fprintf(&b, "- %d back-to-back prepares %s (goal ≤ 0.50 s)\n", burstSize, fmtSeconds(r.burst))
	}
	return b.String()
}

// The drivers' names in the table.
const (
	oursName    = "gpudra serve"
	exampleName = "dra-example-driver"
	// equalQPS is the API client limit both drivers run with in the comparison rows: serve's
	// default.
	equalQPS = "200/400"
)

// memoryRequest is a consumable-capacity request for a share of a GPU.
func memoryRequest(q string) *resourceapi.CapacityRequirements {
	return &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(q)}}
}
