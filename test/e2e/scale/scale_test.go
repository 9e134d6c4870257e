package scale

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
)

var (
	nodesFlag = flag.Int("scale.nodes", 500, "simulated GPU nodes (each a DGX A100 40GB)")
	podsFlag  = flag.Int("scale.pods", 2000, "pods, each with its own ResourceClaim")
	kindsFlag = flag.String("scale.kinds", "upstream-basic,exclusive,static-mig,static-mig-by-profile,dynamic-mig,dynamic-mig-4-profiles,dynamic-mig-options,consumable-memory",
		"comma-separated kinds of claim to run, each on a fresh control plane")
	repeatFlag   = flag.Int("scale.repeat", 1, "runs of each kind, interleaved (kind A, B, ..., A, B, ...): the summary gives medians")
	schedulerQPS = flag.Int("scale.scheduler-qps", 5000,
		"kube-scheduler --kube-api-qps and --kube-api-burst (upstream scheduler_perf gives its scheduler 5000)")
	cpuProfile = flag.String("scale.cpuprofile", "",
		"directory to write kube-scheduler's CPU profile of the scheduling phase into (one file per kind)")
	keepFlag  = flag.Bool("scale.keep", false, "keep each run's directory (logs, certificates) instead of deleting it")
	patchFlag = flag.String("scale.patch", "",
		"unified diff against the pinned Kubernetes module sources (test/e2e/patches/*.patch): every kind also runs, right after its unpatched run, with a kube-scheduler built with it, as the kind \"<kind>+<patch name>\"")
)

// kind is one kind of claim the benchmark schedules: what every node publishes and what each
// pod's claim asks for.
type kind struct {
	name string
	// machineOpts and builderOpts make the node's slices, as serve's flags would.
	machineOpts []gputest.Option
	builderOpts []gpudra.Option
	// class and selector make the claim's one request.
	class, selector string
	// memory, when set, is a consumable-capacity request.
	memory string
	// upstream: the nodes publish scheduler_perf's basic devices instead of a gputest machine
	// (upstreamSlice), half of each node's already allocated (upstream's init claims).
	upstream bool
}

// machine is the fake machine of every node.
const machine = "dgx-a100-40gb"

var kinds = []kind{
	// The anchor: upstream scheduler_perf's SchedulingWithResourceClaimTemplate/5000pods_500nodes
	// shape (10 devices of 13 attributes per node, half of them allocated before the measured
	// pods), scheduled by the same binaries in the same run.
	{name: "upstream-basic", class: upstreamClass, upstream: true},
	{name: "exclusive", class: gpudra.GPUDeviceClassName},
	{name: "static-mig", machineOpts: []gputest.Option{gputest.WithMIGConfig("all-balanced")},
		class: gpudra.MIGDeviceClassName, selector: profileSelector("1g.5gb")},
	// Static MIG grouped by profile (gpudra.WithMIGDevicesByProfile, issue 33).
	{name: "static-mig-by-profile", machineOpts: []gputest.Option{gputest.WithMIGConfig("all-balanced")},
		builderOpts: []gpudra.Option{gpudra.WithMIGDevicesByProfile()},
		class:       gpudra.MIGDeviceClassName, selector: profileSelector("1g.5gb")},
	{name: "dynamic-mig", builderOpts: []gpudra.Option{gpudra.WithDynamicMIG(nil)},
		class: gpudra.MIGDeviceClassName, selector: profileSelector("1g.5gb")},
	// Dynamic MIG publishing only the profiles a cluster might use: 14 devices per GPU, not 26.
	{name: "dynamic-mig-4-profiles", builderOpts: []gpudra.Option{gpudra.WithDynamicMIG(nil),
		gpudra.WithDynamicMIGProfiles("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")},
		class: gpudra.MIGDeviceClassName, selector: profileSelector("1g.5gb")},
	// Dynamic MIG with the driver-side publishing options for MIG-only nodes (issue 33).
	{name: "dynamic-mig-options", builderOpts: []gpudra.Option{gpudra.WithDynamicMIG(nil),
		gpudra.WithPartitionsFirst(), gpudra.WithOneMediaExtensionPlacement()},
		class: gpudra.MIGDeviceClassName, selector: profileSelector("1g.5gb")},
	{name: "consumable-memory", builderOpts: []gpudra.Option{gpudra.WithConsumableMemory(gpudra.ConsumableMemory{})},
		class: gpudra.GPUDeviceClassName, memory: "8Gi"},
}

func profileSelector(p string) string {
	return fmt.Sprintf("device.attributes['%s'].profile == '%s'", gpudra.DefaultDriverName, p)
}

// request is the claim's one device request.
func (k kind) request() resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: k.class}}
	if k.selector != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: k.selector}}}
	}
	if k.memory != "" {
		r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			gpudra.CapMemory: resource.MustParse(k.memory)}}
	}
	return r
}

// BenchmarkScheduling schedules -scale.pods pods with one claim each on -scale.nodes nodes, one
// kind of claim per sub-benchmark, -scale.repeat times interleaved, and reports kube-scheduler's
// CPU time per pod (the primary figure: a shared machine's load changes it much less than
// pods/s), pods/s, and the memory of the API server and scheduler. It prints a table of every
// run and a summary of medians with each kind's ratio to upstream-basic of the same run. Run it
// with -benchtime 1x: one op is one whole run.
func BenchmarkScheduling(b *testing.B) {
	selected := map[string]bool{}
	for _, k := range strings.Split(*kindsFlag, ",") {
		selected[strings.TrimSpace(k)] = true
	}
	schedulers, err := schedulerVariants(b, *patchFlag)
	if err != nil {
		b.Fatal(err)
	}
	var rows []result
	for r := range max(*repeatFlag, 1) {
		for _, k := range kinds {
			if !selected[k.name] {
				continue
			}
			for _, sched := range schedulers {
				// A failed run is reported by its sub-benchmark and left out of the tables.
				if row, ok := runOnce(b, k, sched, r); ok {
					rows = append(rows, row)
				}
			}
		}
	}
	fmt.Print(table(rows))
	fmt.Print(summary(rows))
}

// scheduler is a kube-scheduler binary the kinds run with: the pinned one (no suffix, set nil),
// or one built with a patch (suffix "+<patch name>").
type scheduler struct {
	suffix string
	set    *binaries.Set
}

// schedulerVariants is the pinned kube-scheduler, and, when patchFile is set, one built with it
// (before any run, so that the build's minutes land in no measurement).
func schedulerVariants(tb testing.TB, patchFile string) ([]scheduler, error) {
	variants := []scheduler{{}}
	if patchFile == "" {
		return variants, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	bins, err := binaries.Resolve(ctx)
	if err != nil {
		return nil, err
	}
	if err := bins.Build(ctx, os.Stdout, false); err != nil {
		return nil, err
	}
	patched, err := bins.Patched(ctx, os.Stdout, patchFile, binaries.KubeScheduler)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(filepath.Base(patchFile), filepath.Ext(patchFile))
	tb.Logf("patched kube-scheduler (%s): %s", name, patched.Path(binaries.KubeScheduler))
	return append(variants, scheduler{suffix: "+" + name, set: patched}), nil
}

// runOnce is the sub-benchmark of run r of kind k with scheduler sched, and whether it passed.
func runOnce(b *testing.B, k kind, sched scheduler, r int) (result, bool) {
	var row result
	ok := b.Run(fmt.Sprintf("%s%s/run-%d", k.name, sched.suffix, r+1), func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		for b.Loop() {
			res, err := run(ctx, b, k, sched, *nodesFlag, *podsFlag)
			if err != nil {
				b.Fatal(err)
			}
			row = res
		}
		b.ReportMetric(row.cpuPerPod(row.schedulerCPU), "scheduler-cpu-ms/pod")
		b.ReportMetric(row.podsPerSecond(), "pods/s")
		b.ReportMetric(float64(row.scheduler.RSS)/(1<<20), "scheduler-MiB")
		b.ReportMetric(float64(row.apiserver.RSS)/(1<<20), "apiserver-MiB")
	})
	return row, ok
}
