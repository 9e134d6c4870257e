package selectors_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
)

// fuzzExpressions are the seed corpus of FuzzCompile and FuzzLint: the evaluation test's
// expressions, every CEL expression of the seeds and workloads, and broken ones.
func fuzzExpressions(f *testing.F) []string {
	exprs := append([]string{}, evalExpressions...)
	for _, file := range seedFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		exprs = append(exprs, celExpressions(f, data)...)
	}
	return append(exprs,
		`device.attributes['memory'] >= 40000`,
		`device.attributes['gpu.nvidia.com'].profile in ['1g.5gb', 3]`,
		`device.capacity['gpu.nvidia.com'].memory == '40Gi'`,
		`!(device.attributes['gpu.nvidia.com'].driverVersion < '550')`,
		`device.attributes["gpu.nvidia.com"]["uuid"].startsWith("GPU-") ? true : false`,
		`[1,2,3].exists(x, x == device.attributes['gpu.nvidia.com'].index)`,
		`device.attributes[`, `)`, ``, `'\u00e9' == "é"`,
	)
}

// fuzzDevices are the devices FuzzCompile evaluates on: full GPUs, static MIG devices and the
// synthetic T4/V100.
func fuzzDevices(f *testing.F) []*selectors.Device {
	ds := machine{name: "dgx-a100-40gb"}.devices(f)[:4]
	ds = append(ds, machine{name: "dgx-a100-40gb", mopts: []gputest.Option{balanced40}}.devices(f)[:4]...)
	ds = append(ds, machine{name: "l4x8"}.devices(f)[:1]...)
	return append(ds, syntheticGPUs()...)
}

// FuzzCompile: Compile never panics, rejects with a *CompileError, and what it accepts the
// upstream compiler accepts and evaluates to the same result and the same runtime error on
// every device (a differential test of the prepared-device evaluation).
func FuzzCompile(f *testing.F) {
	for _, e := range fuzzExpressions(f) {
		f.Add(e)
	}
	c := selectors.NewCompiler()
	features := selectors.DefaultFeatures()
	up := dracel.NewCache(100, dracel.Features{EnableConsumableCapacity: features.ConsumableCapacity, EnableListTypeAttributes: features.ListTypeAttributes})
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

// FuzzLint: lint never panics, reports an expression that does not compile, and every
// mechanical fix it offers compiles.
func FuzzLint(f *testing.F) {
	for _, e := range fuzzExpressions(f) {
		f.Add(e)
	}
	c := selectors.NewCompiler()
	l := selectors.NewLinter(selectors.Environment{Compiler: c, Machine: "dgx-a100-40gb", Slices: machine{name: "dgx-a100-40gb", mopts: []gputest.Option{balanced40}}.slices(f)})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, expr string) {
		fs := l.Expression(ctx, expr)
		if _, err := c.Compile(expr); err != nil && len(fs) == 0 {
			t.Fatalf("%q does not compile (%v) and lint found nothing", expr, err)
		}
		for _, fd := range fs {
			if fd.Rule == "" || fd.Message == "" || fd.Line < 0 || fd.Column < 0 {
				t.Fatalf("%q: malformed finding %+v", expr, fd)
			}
			if fd.Fixed == "" {
				continue
			}
			if _, err := c.Compile(fd.Fixed); err != nil {
				t.Fatalf("%q: fix %q does not compile: %v", expr, fd.Fixed, err)
			}
		}
	})
}

// FuzzUpgrade: the upgrader never panics, returns an Upgrade or an error, and upgrading its
// output again changes nothing.
func FuzzUpgrade(f *testing.F) {
	for _, file := range seedFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClaim\nmetadata: {name: x}\nspec: {resourceClassName: gpu.nvidia.com, parametersRef: {kind: GpuClaimParameters, name: p}}\n---\napiVersion: gpu.resource.nvidia.com/v1alpha1\nkind: GpuClaimParameters\nmetadata: {name: p}\nspec: {selector: {orExpression: [{index: 1}, {andExpression: [{brand: '*'}]}]}}\n"))
	f.Add([]byte("kind: Pod\napiVersion: v1\nspec: {resourceClaims: [{name: a, source: {resourceClaimName: b}}]}\n"))
	f.Add([]byte("---\n---\n# only a comment\n"))
	u := selectors.NewUpgrader("")
	f.Fuzz(func(t *testing.T, data []byte) {
		once, err := u.Upgrade(data)
		if once == nil {
			if err == nil {
				t.Fatal("no Upgrade and no error")
			}
			return
		}
		twice, err := u.Upgrade(once.Manifest)
		if twice == nil {
			t.Fatalf("the upgraded manifest does not read back: %v\n%s", err, once.Manifest)
		}
		if !bytes.Equal(once.Manifest, twice.Manifest) {
			t.Fatalf("upgrading twice changed the manifest:\n--- once\n%s\n--- twice\n%s", once.Manifest, twice.Manifest)
		}
	})
}
