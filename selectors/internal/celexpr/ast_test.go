package celexpr

import (
	"testing"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/parser"
	"github.com/gpudra/gpudra/selectors"
)

var spanExpressions = []string{
	`device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`,
	`device.attributes["gpu.nvidia.com"].productName.lowerAscii().matches("a100") || semver('1.0.0').isGreaterThan(device.attributes['x'].y)`,
	"device.attributes[ 'gpu.nvidia.com' ] . type\n == 'mig' && device.attributes['gpu.nvidia.com']['profile'] in ['1g.5gb', '2g.10gb',]",
	`!(device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0) ? device.attributes.foo.bar : size([1, 2]) > -1`,
	`has(device.attributes['d'].n) && [1, 2].all(x, x > 0) && cel.bind(g, device.attributes['gpu.nvidia.com'], g.type == 'gpu')`,
}

// TestSpansReparse: the source span of every node parses to the same expression as the node.
func TestSpansReparse(t *testing.T) {
	env := Env(selectors.NewCompiler().CELFeatures())
	for _, src := range spanExpressions {
		p, ok := Parse(env, src)
		if !ok {
			t.Fatalf("parse %q", src)
		}
		checked := 0
		for _, n := range celast.MatchDescendants(p.Root, celast.AllMatcher()) {
			if n.Kind() == celast.ComprehensionKind || n.Kind() == celast.MapKind || inComprehension(n) {
				continue
			}
			text := p.Text(n)
			if text == "" {
				continue // inside a macro expansion: no source
			}
			want, err := parser.Unparse(n, p.AST.SourceInfo())
			if err != nil {
				continue
			}
			q, ok := Parse(env, text)
			if !ok {
				t.Errorf("%q: span %q of node %d does not parse", src, text, n.ID())
				continue
			}
			got, err := parser.Unparse(q.Root, q.AST.SourceInfo())
			if err != nil || got != want {
				t.Errorf("%q: span %q unparses to %q, the node to %q", src, text, got, want)
			}
			checked++
		}
		if checked < 3 {
			t.Errorf("%q: only %d spans checked", src, checked)
		}
	}
}

func TestAccesses(t *testing.T) {
	env := Env(selectors.NewCompiler().CELFeatures())
	p, _ := Parse(env, spanExpressions[2]+` && device.attributes['memory'] > 1 && device.capacity.x.y == 0`)
	var got []string
	for _, a := range p.Accesses() {
		got = append(got, string(a.Kind)+"|"+a.Domain+"|"+a.Name+"|"+p.Text(a.Expr))
	}
	want := []string{
		"attributes|gpu.nvidia.com|type|device.attributes[ 'gpu.nvidia.com' ] . type",
		"attributes|gpu.nvidia.com|profile|device.attributes['gpu.nvidia.com']['profile']",
		"attributes|memory||device.attributes['memory']",
		"capacity|x|y|device.capacity.x.y",
	}
	if len(got) != len(want) {
		t.Fatalf("accesses = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("access %d = %q, want %q", i, got[i], want[i])
		}
	}
}

func inComprehension(n celast.NavigableExpr) bool {
	for p, ok := n.Parent(); ok; p, ok = p.Parent() {
		if p.Kind() == celast.ComprehensionKind {
			return true
		}
	}
	return false
}
