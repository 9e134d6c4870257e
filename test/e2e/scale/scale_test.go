package scale

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
)

var (
	nodesFlag = flag.Int("scale.nodes", 500, "simulated GPU nodes (each a DGX A100 40GB)")
	podsFlag  = flag.Int("scale.pods", 2000, "pods, each with its own ResourceClaim")
	kindsFlag = flag.String("scale.kinds", "exclusive,static-mig,dynamic-mig,dynamic-mig-4-profiles,consumable-memory",
		"comma-separated kinds of claim to run, each on a fresh control plane")
	schedulerQPS = flag.Int("scale.scheduler-qps", 5000,
		"kube-scheduler --kube-api-qps and --kube-api-burst (upstream scheduler_perf gives its scheduler 5000)")
	cpuProfile = flag.String("scale.cpuprofile", "",
		"directory to write kube-scheduler's CPU profile of the scheduling phase into (one file per kind)")
	keepFlag = flag.Bool("scale.keep", false, "keep each run's directory (logs, certificates) instead of deleting it")
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
}

// machine is the fake machine of every node.
const machine = "dgx-a100-40gb"

var kinds = []kind{
	{name: "exclusive", class: gpudra.GPUDeviceClassName},
	{name: "static-mig", machineOpts: []gputest.Option{gputest.WithMIGConfig("all-balanced")},
		class: gpudra.MIGDeviceClassName, selector: profileSelector("1g.5gb")},
	{name: "dynamic-mig", builderOpts: []gpudra.Option{gpudra.WithDynamicMIG(nil)},
		class: gpudra.MIGDeviceClassName, selector: profileSelector("1g.5gb")},
	// Dynamic MIG publishing only the profiles a cluster might use: 14 devices per GPU, not 26.
	{name: "dynamic-mig-4-profiles", builderOpts: []gpudra.Option{gpudra.WithDynamicMIG(nil),
		gpudra.WithDynamicMIGProfiles("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")},
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
// kind of claim per sub-benchmark, and reports the scheduler's pods/s and the memory of the API
// server and scheduler. Run it with -benchtime 1x: one op is one whole run.
func BenchmarkScheduling(b *testing.B) {
	selected := map[string]bool{}
	for _, k := range strings.Split(*kindsFlag, ",") {
		selected[strings.TrimSpace(k)] = true
	}
	var rows []result
	for _, k := range kinds {
		if !selected[k.name] {
			continue
		}
		b.Run(k.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			var row result
			for b.Loop() {
				r, err := run(ctx, b, k, *nodesFlag, *podsFlag)
				if err != nil {
					b.Fatal(err)
				}
				row = r
			}
			b.ReportMetric(row.podsPerSecond(), "pods/s")
			b.ReportMetric(row.cpuPerPod(row.schedulerCPU), "scheduler-cpu-ms/pod")
			b.ReportMetric(float64(row.scheduler.RSS)/(1<<20), "scheduler-MiB")
			b.ReportMetric(float64(row.apiserver.RSS)/(1<<20), "apiserver-MiB")
			rows = append(rows, row)
		})
	}
	fmt.Print(table(rows))
}
