package lint_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/upgrade"
)

// TestEverySeedExpressionCompilesOrGetsAFix is the acceptance criterion: every CEL expression
// of the seeds and of the workloads — as written, and after upgrading the manifest (which turns
// seed 002's GpuClaimParameters into CEL) — compiles, or lint reports it with a suggested fix,
// and every mechanical fix compiles.
func TestEverySeedExpressionCompilesOrGetsAFix(t *testing.T) {
	c := selectors.NewCompiler()
	l := lint.NewLinter(lint.Environment{Compiler: c})
	u := upgrade.NewUpgrader("")
	ctx := context.Background()
	seen := map[string]bool{}
	broken := 0
	for _, f := range seltest.SeedFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		exprs := seltest.CELExpressions(t, data)
		if up, _ := u.Upgrade(data); up != nil {
			exprs = append(exprs, seltest.CELExpressions(t, up.Manifest)...)
		}
		for _, e := range exprs {
			if seen[e] {
				continue
			}
			seen[e] = true
			findings := l.Expression(ctx, e)
			if _, err := c.Compile(e); err == nil {
				continue
			}
			broken++
			fixed := false
			for _, fd := range findings {
				if fd.Fixed != "" {
					if _, err := c.Compile(fd.Fixed); err != nil {
						t.Errorf("%s: fix %q for %q does not compile: %v", f, fd.Fixed, e, err)
					}
					fixed = true
				}
			}
			if !fixed {
				t.Errorf("%s: %q does not compile and lint offers no fix: %v", f, e, findings)
			}
		}
	}
	// 000: 3 profiles; 001: the class, 1g.5gb claim/template, 3 Pulumi; 002: 3 upgraded;
	// 003: 1; the workloads add their own.
	if len(seen) < 25 {
		t.Errorf("checked %d distinct expressions, want at least 25", len(seen))
	}
	if broken != 1 {
		t.Errorf("%d expressions do not compile, want 1 (seed 003's attributes['memory'])", broken)
	}
}
