package selectors_test

import (
	"context"
	"testing"

	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
)

// fuzzDevices are the devices FuzzCompile evaluates on: full GPUs, static MIG devices and the
// synthetic T4/V100.
func fuzzDevices(f *testing.F) []*selectors.Device {
	ds := seltest.Machine{Name: "dgx-a100-40gb"}.Devices(f)[:4]
	ds = append(ds, seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}.Devices(f)[:4]...)
	ds = append(ds, seltest.Machine{Name: "l4x8"}.Devices(f)[:1]...)
	return append(ds, seltest.SyntheticGPUs()...)
}

// FuzzCompile: Compile never panics, rejects with a *CompileError, and what it accepts the
// upstream compiler accepts and evaluates to the same result and the same runtime error on
// every device (a differential test of the prepared-device evaluation).
func FuzzCompile(f *testing.F) {
	for _, e := range seltest.FuzzExpressions(f) {
		f.Add(e)
	}
	c := selectors.NewCompiler()
	up := dracel.NewCache(100, selectors.NewCompiler().CELFeatures())
	devices := fuzzDevices(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, expr string) {
		sel, err := c.Compile(expr)
		if err != nil {
			if selectors.AsCompileError(err) == nil {
				t.Fatalf("Compile(%q) error %T is not a *CompileError: %v", expr, err, err)
			}
			return
		}
		ref := up.GetOrCompile(expr)
		if ref.Error != nil {
			t.Fatalf("Compile(%q) accepted what the scheduler's compiler rejects: %v", expr, ref.Error)
		}
		for _, d := range devices {
			want, _, wantErr := ref.DeviceMatches(ctx, dracel.Device{Driver: d.Driver, AllowMultipleAllocations: d.Device.AllowMultipleAllocations,
				Attributes: d.Device.Attributes, Capacity: d.Device.Capacity})
			got, gotErr := sel.Matches(ctx, d)
			if got != want || errString(gotErr) != errString(wantErr) {
				t.Fatalf("%q on %s: got (%v, %v), upstream (%v, %v)", expr, d.Name(), got, gotErr, want, wantErr)
			}
		}
	})
}
