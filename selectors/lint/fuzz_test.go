package lint_test

import (
	"context"
	"testing"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/lint"
)

// FuzzLint: lint never panics, reports an expression that does not compile, and every
// mechanical fix it offers compiles.
func FuzzLint(f *testing.F) {
	for _, e := range seltest.FuzzExpressions(f) {
		f.Add(e)
	}
	c := selectors.NewCompiler()
	l := lint.NewLinter(lint.Environment{Compiler: c, Machine: "dgx-a100-40gb", Slices: seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}.Slices(f)})
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
