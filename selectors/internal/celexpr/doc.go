// Package celexpr reads device selectors as syntax for the selectors packages: it parses an
// expression without type checking (so that lint can look into expressions that do not
// compile), finds every read of device.attributes and device.capacity with its domain and
// name, the comparison it is an operand of, and the source span of any node, and applies edits
// to the source (the mechanical fixes of lint).
//
// # Finding accesses
//
//	p, ok := celexpr.Parse(celexpr.Env(compiler.CELFeatures()), expr)
//	if !ok {
//		return // does not parse
//	}
//	for _, a := range p.Accesses() {
//		line, col := p.Position(a.Expr)
//		fmt.Println(a.Kind, a.Domain, a.Name, line, col)
//	}
package celexpr
