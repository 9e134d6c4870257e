package scale

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// stallTimeout ends a run whose scheduler binds nothing for this long.
const stallTimeout = 2 * time.Minute

// bindWatch records when each pod of the namespace is first seen bound to a node.
type bindWatch struct {
	rw   *watchtools.RetryWatcher
	want int
}

// watchBinds starts watching the namespace's pods from now on.
func watchBinds(ctx context.Context, client kubernetes.Interface, want int) (*bindWatch, error) {
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, err
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return client.CoreV1().Pods(namespace).Watch(ctx, opts)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	if err != nil {
		return nil, err
	}
	return &bindWatch{rw: rw, want: want}, nil
}

func (w *bindWatch) stop() { w.rw.Stop() }

// wait returns the bind times, in order, once every pod is bound; onFirst is called at the
// first. It fails when the scheduler exits or binds nothing for stallTimeout.
func (w *bindWatch) wait(ctx context.Context, scheduler *framework.Process, onFirst func()) ([]time.Time, error) {
	seen := map[string]bool{}
	var binds []time.Time
	stall := time.NewTimer(stallTimeout)
	defer stall.Stop()
	for len(binds) < w.want {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d pods bound: %w", len(binds), w.want, ctx.Err())
		case <-scheduler.Done():
			_, err := scheduler.Exited()
			return nil, fmt.Errorf("kube-scheduler exited after %d of %d binds: %v", len(binds), w.want, err)
		case <-stall.C:
			return nil, fmt.Errorf("no pod bound for %s; %d of %d bound", stallTimeout, len(binds), w.want)
		case ev, ok := <-w.rw.ResultChan():
			if !ok {
				return nil, fmt.Errorf("pod watch closed after %d of %d binds", len(binds), w.want)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || p.Spec.NodeName == "" || seen[p.Name] {
				continue
			}
			seen[p.Name] = true
			binds = append(binds, time.Now())
			if len(binds) == 1 {
				onFirst()
			}
			stall.Reset(stallTimeout)
		}
	}
	return binds, nil
}

// cpuMeter measures the CPU time processes use between start and stop.
type cpuMeter struct {
	procs      []*framework.Process
	start, use []time.Duration
}

func (m *cpuMeter) begin() {
	m.start = make([]time.Duration, len(m.procs))
	for i, p := range m.procs {
		u, _ := p.Usage() // zero where /proc cannot be read: the table shows no figure
		m.start[i] = u.CPU
	}
}

func (m *cpuMeter) end() {
	m.use = make([]time.Duration, len(m.procs))
	for i, p := range m.procs {
		u, _ := p.Usage()
		m.use[i] = max(u.CPU-m.start[i], 0)
	}
}

// result is one run of one kind.
type result struct {
	kind                          string
	nodes, pods                   int
	devicesPerNode, slicesPerNode int
	// setup is how long nodes, slices, claims and pods took to create.
	setup time.Duration
	// schedulerStart is when kube-scheduler was started; binds are when each pod was seen bound.
	schedulerStart time.Time
	binds          []time.Time
	// scheduler and apiserver are the components' usage once every pod is bound.
	scheduler, apiserver framework.Usage
	// schedulerCPU, apiserverCPU, etcdCPU and controllerCPU are the CPU time each component
	// used from the first bind to the last.
	schedulerCPU, apiserverCPU, etcdCPU, controllerCPU time.Duration
	// prefilled is how many devices were allocated before the measured pods (upstream-basic).
	prefilled int
}

// idleBound is the pods/s two otherwise idle cores would allow kube-scheduler and
// kube-apiserver at the CPU time per pod measured: 2 s of CPU per second over their sum.
func (r result) idleBound() float64 {
	perPod := r.cpuPerPod(r.schedulerCPU) + r.cpuPerPod(r.apiserverCPU)
	if perPod == 0 {
		return 0
	}
	return 2000 / perPod
}

// cpuPerPod is a CPU time per pod bound after the first, in milliseconds.
func (r result) cpuPerPod(d time.Duration) float64 {
	if len(r.binds) < 2 {
		return 0
	}
	return float64(d) / float64(time.Millisecond) / float64(len(r.binds)-1)
}

// podsPerSecond is the scheduler's rate from its first bind to its last.
func (r result) podsPerSecond() float64 {
	if len(r.binds) < 2 {
		return 0
	}
	return float64(len(r.binds)-1) / r.binds[len(r.binds)-1].Sub(r.binds[0]).Seconds()
}

// windows counts the binds in each whole second after the first bind, as scheduler_perf's
// throughput collector samples, and returns the median and the lowest count.
func (r result) windows() (median, lowest float64) {
	if len(r.binds) < 2 {
		return 0, 0
	}
	first := r.binds[0]
	n := int(r.binds[len(r.binds)-1].Sub(first) / time.Second)
	if n == 0 {
		return r.podsPerSecond(), r.podsPerSecond()
	}
	counts := make([]float64, n)
	for _, t := range r.binds {
		if i := int(t.Sub(first) / time.Second); i < n {
			counts[i]++
		}
	}
	slices.Sort(counts)
	return counts[n/2], counts[0]
}

func mib(b int64) string { return strconv.FormatInt(b>>20, 10) }

// table renders the rows as markdown, kube-scheduler's CPU per pod first.
func table(rows []result) string {
	var b strings.Builder
	b.WriteString("\n| kind | CPU ms per pod: kube-scheduler / kube-apiserver / etcd / kube-controller-manager | pods/s first→last bind | 1-s windows median / min | bound on 2 idle cores, pods/s | nodes | devices/node (slices) | pre-filled | pods | scheduler start → first bind | kube-scheduler RSS (peak) MiB | kube-apiserver RSS (peak) MiB | set-up |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		med, low := row.windows()
		firstBind := time.Duration(0)
		if len(row.binds) > 0 {
			firstBind = row.binds[0].Sub(row.schedulerStart)
		}
		fmt.Fprintf(&b, "| %s | **%.1f** / %.1f / %.1f / %.1f | %.0f | %.0f / %.0f | %.0f | %d | %d (%d) | %d | %d | %s | %s (%s) | %s (%s) | %s |\n",
			row.kind, row.cpuPerPod(row.schedulerCPU), row.cpuPerPod(row.apiserverCPU), row.cpuPerPod(row.etcdCPU), row.cpuPerPod(row.controllerCPU),
			row.podsPerSecond(), med, low, row.idleBound(), row.nodes, row.devicesPerNode, row.slicesPerNode, row.prefilled, row.pods,
			firstBind.Round(100*time.Millisecond), mib(row.scheduler.RSS), mib(row.scheduler.PeakRSS),
			mib(row.apiserver.RSS), mib(row.apiserver.PeakRSS), row.setup.Round(time.Second))
	}
	return b.String()
}

// summary renders, per kind in the order first run, the median kube-scheduler CPU per pod and
// pods/s over its runs, the ratio of the CPU median to upstream-basic's (when it ran), and for a
// kind run with a patched scheduler ("<kind>+<patch>") the ratio to the unpatched kind's median.
func summary(rows []result) string {
	var order []string
	cpu, rate := map[string][]float64{}, map[string][]float64{}
	for _, r := range rows {
		if _, ok := cpu[r.kind]; !ok {
			order = append(order, r.kind)
		}
		cpu[r.kind] = append(cpu[r.kind], r.cpuPerPod(r.schedulerCPU))
		rate[r.kind] = append(rate[r.kind], r.podsPerSecond())
	}
	anchor := median(cpu["upstream-basic"])
	var b strings.Builder
	b.WriteString("\n| kind | runs | kube-scheduler CPU ms per pod, median (range) | × upstream-basic | × unpatched | pods/s, median |\n|---|---|---|---|---|---|\n")
	for _, k := range order {
		fmt.Fprintf(&b, "| %s | %d | **%.1f** (%.1f–%.1f) | %s | %s | %.0f |\n", k, len(cpu[k]), median(cpu[k]),
			slices.Min(cpu[k]), slices.Max(cpu[k]), ratio(median(cpu[k]), anchor), unpatchedRatio(k, cpu), median(rate[k]))
	}
	return b.String()
}

// ratio renders x/anchor, or "–" without an anchor.
func ratio(x, anchor float64) string {
	if anchor <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x/anchor)
}

// unpatchedRatio is kind k's median CPU per pod over that of the same kind without its patch
// suffix ("dynamic-mig+pool-cache" over "dynamic-mig"), "–" for an unpatched kind.
func unpatchedRatio(k string, cpu map[string][]float64) string {
	base, _, patched := strings.Cut(k, "+")
	if !patched {
		return "–"
	}
	return ratio(median(cpu[k]), median(cpu[base]))
}

// median of xs (the lower middle for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
