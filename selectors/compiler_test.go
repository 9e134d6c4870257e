package selectors_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
)

// TestMatchesLikeUpstream is a differential test: Selector.Matches must give the same result
// and the same runtime errors as the upstream DeviceMatches the scheduler calls, for every
// device of every test machine.
func TestMatchesLikeUpstream(t *testing.T) {
	c := selectors.NewCompiler()
	up := dracel.NewCache(10, selectors.NewCompiler().CELFeatures())
	// A context that can be cancelled takes the scheduler's interruptible path.
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, m := range seltest.Machines() {
		slices := m.Slices(t)
		devices := selectors.DevicesFromSlices(slices)
		for _, expr := range seltest.EvalExpressions {
			sel, err := c.Compile(expr)
			if err != nil {
				t.Fatalf("Compile(%q): %v", expr, err)
			}
			ref := up.GetOrCompile(expr)
			if ref.Error != nil {
				t.Fatalf("upstream compile %q: %v", expr, ref.Error)
			}
			for i, d := range devices {
				ctx := context.Background()
				if i%2 == 1 {
					ctx = cancellable
				}
				want, _, wantErr := ref.DeviceMatches(ctx, dracel.Device{Driver: d.Driver, AllowMultipleAllocations: d.Device.AllowMultipleAllocations, Attributes: d.Device.Attributes, Capacity: d.Device.Capacity})
				got, gotErr := sel.Matches(ctx, d)
				if got != want || errString(gotErr) != errString(wantErr) {
					t.Errorf("%s %s: %q: got (%v, %v), upstream (%v, %v)", m.Name, d.Name(), expr, got, gotErr, want, wantErr)
				}
			}
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestCompileErrors(t *testing.T) {
	c := selectors.NewCompiler()
	cases := []struct {
		expr string
		kind selectors.ErrorKind
		want []selectors.Issue
		// line, column and prefix check a single issue when its full message is cel-go's business.
		line, column int
		prefix       string
	}{
		{
			expr: `device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`,
			kind: selectors.ErrorInvalid,
			// The checker points at the operator.
			want: []selectors.Issue{{Line: 1, Column: 1 + strings.Index(`device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`, ">="), Message: "found no matching overload for '_>=_' applied to '(map(string, any), int)'"}},
		},
		{
			expr: "device.driver ==\n  'x' &&",
			kind: selectors.ErrorInvalid,
			// The parser points just past the end of line 2 ("  'x' &&" is 8 bytes).
			line: 2, column: 9, prefix: "Syntax error: mismatched input '<EOF>'",
		},
		{
			expr: `device.driver`,
			kind: selectors.ErrorInvalid,
			want: []selectors.Issue{{Message: "must evaluate to bool or the unknown type, not string"}},
		},
		{
			expr: `device.attributes['gpu.nvidia.com'].type == 'gpu' && ` + strings.Repeat("x", resourceapi.CELSelectorExpressionMaxLength),
			kind: selectors.ErrorTooLong,
		},
	}
	for _, tc := range cases {
		_, err := c.Compile(tc.expr)
		ce := selectors.AsCompileError(err)
		if ce == nil {
			t.Errorf("Compile(%q) = %v, want a *CompileError", abbrev(tc.expr), err)
			continue
		}
		if ce.Kind != tc.kind {
			t.Errorf("Compile(%q) kind = %s, want %s", abbrev(tc.expr), ce.Kind, tc.kind)
		}
		if tc.prefix != "" {
			if len(ce.Issues) != 1 || ce.Issues[0].Line != tc.line || ce.Issues[0].Column != tc.column || !strings.HasPrefix(ce.Issues[0].Message, tc.prefix) {
				t.Errorf("Compile(%q) issues = %v, want one at %d:%d starting %q", abbrev(tc.expr), ce.Issues, tc.line, tc.column, tc.prefix)
			}
		}
		if tc.want != nil {
			if diff := cmp.Diff(tc.want, ce.Issues); diff != "" {
				t.Errorf("Compile(%q) issues (-want +got):\n%s", abbrev(tc.expr), diff)
			}
		}
	}
}

func abbrev(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// TestCostLimit: the API server's cost estimate decides; an expression over the limit fails to
// compile with ErrorTooExpensive, and the same expression compiles under a higher limit.
func TestCostLimit(t *testing.T) {
	// Each all() over the attribute map multiplies the estimate.
	expr := `device.attributes['gpu.nvidia.com'].all(a, device.attributes['gpu.nvidia.com'].all(b, device.attributes['gpu.nvidia.com'].all(c, device.attributes['gpu.nvidia.com'].all(d, a != b || c != d))))`
	upstream := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true}).CompileCELExpression(expr, dracel.Options{})
	if upstream.Error != nil {
		t.Fatalf("upstream: %v", upstream.Error)
	}
	if upstream.MaxCost <= resourceapi.CELSelectorExpressionMaxCost {
		t.Fatalf("test expression costs %d, want it over the API limit", upstream.MaxCost)
	}
	_, err := selectors.NewCompiler().Compile(expr)
	ce := selectors.AsCompileError(err)
	if ce == nil || ce.Kind != selectors.ErrorTooExpensive || ce.Cost != upstream.MaxCost || ce.Limit != resourceapi.CELSelectorExpressionMaxCost {
		t.Fatalf("Compile = %v, want ErrorTooExpensive with cost %d", err, upstream.MaxCost)
	}
	sel, err := selectors.NewCompiler(selectors.WithCostLimit(upstream.MaxCost)).Compile(expr)
	if err != nil {
		t.Fatalf("with a higher limit: %v", err)
	}
	if sel.Cost != upstream.MaxCost {
		t.Errorf("Cost = %d, want %d", sel.Cost, upstream.MaxCost)
	}
}

// TestRuntimeCostLimitIsTheSchedulers: the scheduler aborts a selector whose actual cost
// exceeds resourceapi.CELSelectorExpressionMaxCost, however it was stored (here: validated
// under a raised WithCostLimit, or compiled as stored); Matches gives the same error, through
// Compile and CompileStored alike.
func TestRuntimeCostLimitIsTheSchedulers(t *testing.T) {
	var list []string
	for i := range 100 {
		list = append(list, fmt.Sprint(i))
	}
	l := "[" + strings.Join(list, ",") + "]"
	// 100³ iterations: far over the runtime limit, though every step is cheap.
	expr := l + ".all(a, " + l + ".all(b, " + l + ".all(c, a + b + c >= 0)))"

	upstream := dracel.NewCache(10, selectors.NewCompiler().CELFeatures()).GetOrCompile(expr)
	if upstream.Error != nil {
		t.Fatalf("upstream: %v", upstream.Error)
	}
	dev := seltest.Machine{Name: "dgx-a100-40gb"}.Devices(t)[0]
	ctx := context.Background()
	_, _, upstreamErr := upstream.DeviceMatches(ctx, dracel.Device{Driver: dev.Driver, Attributes: dev.Device.Attributes, Capacity: dev.Device.Capacity})
	if upstreamErr == nil || !strings.Contains(upstreamErr.Error(), "actual cost limit exceeded") {
		t.Fatalf("upstream DeviceMatches = %v, want the runtime cost limit", upstreamErr)
	}

	raised, err := selectors.NewCompiler(selectors.WithCostLimit(math.MaxUint64)).Compile(expr)
	if err != nil {
		t.Fatalf("Compile under a raised limit: %v", err)
	}
	stored, err := selectors.NewCompiler().CompileStored(expr)
	if err != nil {
		t.Fatalf("CompileStored: %v", err)
	}
	if _, err := selectors.NewCompiler().Compile(expr); selectors.AsCompileError(err) == nil || selectors.AsCompileError(err).Kind != selectors.ErrorTooExpensive {
		t.Errorf("Compile under the API limit = %v, want ErrorTooExpensive (CompileStored must not have changed it)", err)
	}
	for name, sel := range map[string]*selectors.Selector{"Compile+WithCostLimit": raised, "CompileStored": stored} {
		_, err := sel.Matches(ctx, dev)
		if err == nil || err.Error() != upstreamErr.Error() {
			t.Errorf("%s: Matches = %v, want the scheduler's %q", name, err, upstreamErr)
		}
	}
}

// TestCompileStoredSkipsNewObjectChecks: an expression the API server would refuse in a new
// object (too long) is evaluated as the scheduler evaluates it once stored; syntax errors are
// still CompileErrors.
func TestCompileStoredSkipsNewObjectChecks(t *testing.T) {
	long := "device.driver == '" + strings.Repeat("x", resourceapi.CELSelectorExpressionMaxLength) + "' || true"
	c := selectors.NewCompiler()
	if _, err := c.Compile(long); selectors.AsCompileError(err) == nil || selectors.AsCompileError(err).Kind != selectors.ErrorTooLong {
		t.Fatalf("Compile = %v, want ErrorTooLong", err)
	}
	sel, err := c.CompileStored(long)
	if err != nil {
		t.Fatalf("CompileStored: %v", err)
	}
	got, err := sel.Matches(context.Background(), seltest.Machine{Name: "dgx-a100-40gb"}.Devices(t)[0])
	if err != nil || !got {
		t.Errorf("Matches = %v, %v; want true", got, err)
	}
	if _, err := c.CompileStored("device.driver =="); selectors.AsCompileError(err) == nil {
		t.Errorf("CompileStored of a syntax error = %v, want a *CompileError", err)
	}
}

// TestFeaturesChooseTheEnvironment: device.allowMultipleAllocations exists only with
// consumable capacity, as in the API server.
func TestFeaturesChooseTheEnvironment(t *testing.T) {
	f := selectors.NewCompiler().CELFeatures()
	f.EnableConsumableCapacity = false
	_, err := selectors.NewCompiler(selectors.WithCELFeatures(f)).Compile(`device.allowMultipleAllocations`)
	if selectors.AsCompileError(err) == nil {
		t.Errorf("without consumable capacity: err = %v, want a compile error", err)
	}
	if _, err := selectors.NewCompiler().Compile(`device.allowMultipleAllocations`); err != nil {
		t.Errorf("with default features: %v", err)
	}
}

func TestCompileIsCached(t *testing.T) {
	c := selectors.NewCompiler(selectors.WithCacheSize(2))
	a, _ := c.Compile("true")
	b, _ := c.Compile("true")
	if a != b {
		t.Errorf("second Compile returned a new selector")
	}
	_, err1 := c.Compile("nope(")
	_, err2 := c.Compile("nope(")
	if err1 == nil || !errors.Is(err2, err1) {
		t.Errorf("errors are not cached: %v, %v", err1, err2)
	}
	c.Compile("false")
	c.Compile("1 == 1")
	if d, _ := c.Compile("true"); d == a {
		t.Errorf("cache kept more than 2 entries")
	}
	_ = fmt.Sprint()
}
