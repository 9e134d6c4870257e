package celexpr_test

import (
	"fmt"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/celexpr"
)

// Example lists the device accesses of a selector with their positions and the comparison
// each is an operand of.
func Example() {
	p, ok := celexpr.Parse(celexpr.Env(selectors.NewCompiler().CELFeatures()),
		"device.attributes['gpu.nvidia.com'].type == 'mig' &&\n  device.capacity['gpu.nvidia.com'].memory >= 40000")
	if !ok {
		panic("does not parse")
	}
	for _, a := range p.Accesses() {
		line, col := p.Position(a.Expr)
		cmp, _ := celexpr.ComparisonOf(a.Expr)
		fmt.Println(a.Kind, a.Domain, a.Name, line, col, cmp.Op)
	}
	// Output:
	// attributes gpu.nvidia.com type 1 1 ==
	// capacity gpu.nvidia.com memory 2 3 >=
}
