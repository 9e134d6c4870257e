package selectors_test

import (
	"context"
	"os"
	"testing"

	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/upgrade"
)

// benchSelector is a seed selector and the devices it is evaluated on (those its DeviceClass
// selects, as in the scheduler).
type benchSelector struct {
	name    string
	expr    string
	devices []*selectors.Device
}

func seedSelectors(b *testing.B) []benchSelector {
	b.Helper()
	full := seltest.Machine{Name: "dgx-a100-40gb"}.Devices(b)
	mig40 := seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}.Devices(b)
	mig80 := seltest.Machine{Name: "dgx-a100-80gb", MOpts: []gputest.Option{seltest.Balanced80}}.Devices(b)
	// Seed 003's selector does not compile; its lint fix is what users end up with.
	fixed := lint.NewLinter(lint.Environment{}).Expression(context.Background(), `device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`)[0].Fixed
	return []benchSelector{
		{"001-class-gpu", `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'`, full},
		{"001-mig-1g.5gb", "device.attributes[\"gpu.nvidia.com\"].type == \"mig\" &&\ndevice.attributes[\"gpu.nvidia.com\"].profile == \"1g.5gb\"\n", mig40},
		{"000-profile-3g.40gb", "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'\n", mig80},
		{"003-memory-fixed", fixed, full},
		{"002-or-t4-v100", upgradedSelector(b, "testdata/seeds/002-selector-or.yaml"), full},
		{"002-inference-gpu", upgradedSelector(b, "testdata/seeds/002-inference-gpu.yaml"), full},
	}
}

func upgradedSelector(b *testing.B, file string) string {
	b.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	up, err := upgrade.NewUpgrader("").Upgrade(data)
	if err != nil {
		b.Fatal(err)
	}
	exprs := seltest.CELExpressions(b, up.Manifest)
	if len(exprs) != 1 {
		b.Fatalf("%s: %d expressions", file, len(exprs))
	}
	return exprs[0]
}

// BenchmarkMatches is the evaluation of each seed selector, compiled, per device: ns/op is the
// cost of one device.
func BenchmarkMatches(b *testing.B) {
	c := selectors.NewCompiler()
	ctx := context.Background()
	for _, s := range seedSelectors(b) {
		sel, err := c.Compile(s.expr)
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := sel.Matches(ctx, s.devices[i%len(s.devices)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkUpstreamDeviceMatches is the same work through the upstream DeviceMatches the
// scheduler calls, which converts the device on every call.
func BenchmarkUpstreamDeviceMatches(b *testing.B) {
	cache := dracel.NewCache(100, selectors.NewCompiler().CELFeatures())
	ctx := context.Background()
	for _, s := range seedSelectors(b) {
		expr := cache.GetOrCompile(s.expr)
		if expr.Error != nil {
			b.Fatal(expr.Error)
		}
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				d := s.devices[i%len(s.devices)]
				if _, _, err := expr.DeviceMatches(ctx, dracel.Device{Driver: d.Driver, AllowMultipleAllocations: d.Device.AllowMultipleAllocations,
					Attributes: d.Device.Attributes, Capacity: d.Device.Capacity}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkCompile is a cached Compile (the common case) and a first compilation.
func BenchmarkCompile(b *testing.B) {
	expr := `device.attributes['gpu.nvidia.com'].type == 'mig' && device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`
	b.Run("cached", func(b *testing.B) {
		c := selectors.NewCompiler()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Compile(expr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := selectors.NewCompiler().Compile(expr); err != nil {
				b.Fatal(err)
			}
		}
	})
}
