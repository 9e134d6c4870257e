package selectors

import (
	"strings"
	"unicode"

	celgo "github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
)

// parsed is a selector parsed (not type-checked, so that lint can look into expressions that do
// not compile) with what lint needs to point into its source.
type parsed struct {
	src  string
	ast  *celast.AST
	root celast.NavigableExpr
}

func parseExpression(env *celgo.Env, src string) (*parsed, bool) {
	if env == nil {
		return nil, false
	}
	a, iss := env.Parse(src)
	if iss != nil && iss.Err() != nil {
		return nil, false
	}
	nat := a.NativeRep()
	return &parsed{src: src, ast: nat, root: celast.NavigateAST(nat)}, true
}

// accessKind is the map a device access reads.
type accessKind string

const (
	accessAttribute accessKind = "attributes"
	accessCapacity  accessKind = "capacity"
)

// access is one read of device.attributes or device.capacity.
type access struct {
	kind   accessKind
	domain string
	// name is "" for a domain-only access (device.attributes['x'] used as a value).
	name string
	// expr is the node of the whole access (the select or index of the name, or of the domain
	// when name is "").
	expr celast.NavigableExpr
	// domainExpr is the literal (or select field) that names the domain.
	domainLit celast.NavigableExpr
}

// accesses finds every device.attributes[...] and device.capacity[...] read in the expression.
func (p *parsed) accesses() []access {
	var out []access
	for _, n := range celast.MatchDescendants(p.root, celast.AllMatcher()) {
		kind, domain, lit, ok := domainAccess(n)
		if !ok {
			continue
		}
		a := access{kind: kind, domain: domain, expr: n, domainLit: lit}
		if parent, ok := n.Parent(); ok {
			if name, ok := nameOf(parent, n); ok {
				a.name, a.expr = name, parent
			}
		}
		out = append(out, a)
	}
	return out
}

// domainAccess matches device.attributes['domain'] (or device.attributes.domain).
func domainAccess(n celast.NavigableExpr) (accessKind, string, celast.NavigableExpr, bool) {
	var mapExpr celast.Expr
	var domain string
	var lit celast.NavigableExpr
	switch n.Kind() {
	case celast.CallKind:
		call := n.AsCall()
		if call.FunctionName() != "_[_]" || len(call.Args()) != 2 {
			return "", "", nil, false
		}
		s, ok := stringLiteral(call.Args()[1])
		if !ok {
			return "", "", nil, false
		}
		mapExpr, domain = call.Args()[0], s
		lit = child(n, 1)
	case celast.SelectKind:
		if n.AsSelect().IsTestOnly() {
			return "", "", nil, false
		}
		mapExpr, domain = n.AsSelect().Operand(), n.AsSelect().FieldName()
	default:
		return "", "", nil, false
	}
	if mapExpr.Kind() != celast.SelectKind {
		return "", "", nil, false
	}
	sel := mapExpr.AsSelect()
	if sel.Operand().Kind() != celast.IdentKind || sel.Operand().AsIdent() != "device" {
		return "", "", nil, false
	}
	switch accessKind(sel.FieldName()) {
	case accessAttribute, accessCapacity:
		return accessKind(sel.FieldName()), domain, lit, true
	}
	return "", "", nil, false
}

// nameOf matches parent as .name or ['name'] applied to n.
func nameOf(parent, n celast.NavigableExpr) (string, bool) {
	switch parent.Kind() {
	case celast.SelectKind:
		if parent.AsSelect().Operand().ID() == n.ID() {
			return parent.AsSelect().FieldName(), true
		}
	case celast.CallKind:
		call := parent.AsCall()
		if call.FunctionName() == "_[_]" && len(call.Args()) == 2 && call.Args()[0].ID() == n.ID() {
			return stringLiteral(call.Args()[1])
		}
	}
	return "", false
}

func child(n celast.NavigableExpr, i int) celast.NavigableExpr {
	c := n.Children()
	if i < len(c) {
		return c[i]
	}
	return nil
}

func stringLiteral(e celast.Expr) (string, bool) {
	if e == nil || e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// comparisons are the operators lint understands.
var comparisons = map[string]string{
	"_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">=", "@in": "in",
}

// comparison is a comparison with a device access on one side.
type comparison struct {
	op    string // "==", "in", ...
	call  celast.NavigableExpr
	other celast.NavigableExpr // the side that is not the access
	// accessLeft is true when the access is the left operand.
	accessLeft bool
}

// comparisonOf returns the comparison a node is an operand of.
func comparisonOf(n celast.NavigableExpr) (comparison, bool) {
	parent, ok := n.Parent()
	if !ok || parent.Kind() != celast.CallKind {
		return comparison{}, false
	}
	op, ok := comparisons[parent.AsCall().FunctionName()]
	if !ok || len(parent.AsCall().Args()) != 2 {
		return comparison{}, false
	}
	kids := parent.Children()
	if len(kids) != 2 {
		return comparison{}, false
	}
	if kids[0].ID() == n.ID() {
		return comparison{op: op, call: parent, other: kids[1], accessLeft: true}, true
	}
	return comparison{op: op, call: parent, other: kids[0]}, true
}

// flipped is the operator with its operands swapped (a < b is b > a).
func flipped(op string) string {
	switch op {
	case "<":
		return ">"
	case "<=":
		return ">="
	case ">":
		return "<"
	case ">=":
		return "<="
	}
	return op
}

// literalStrings returns the string literals of a literal or a list of literals.
func literalStrings(n celast.NavigableExpr) []string {
	if s, ok := stringLiteral(n); ok {
		return []string{s}
	}
	if n.Kind() != celast.ListKind {
		return nil
	}
	var out []string
	for _, e := range n.AsList().Elements() {
		if s, ok := stringLiteral(e); ok {
			out = append(out, s)
		}
	}
	return out
}

// span returns the byte range of a node in the source: from its first to its last character.
// Parentheses around the node are not part of it.
func (p *parsed) span(n celast.Expr) (start, end int, ok bool) {
	start, ok = p.start(n)
	if !ok {
		return 0, 0, false
	}
	end, ok = p.end(n)
	if !ok || end <= start || end > len(p.src) {
		return 0, 0, false
	}
	return p.balance(start, end)
}

// balance widens [start, end) over the parentheses that an operand's own span leaves out:
// "!(a)" ends after the ")" and "(a || b) && c" starts at the "(".
func (p *parsed) balance(start, end int) (int, int, bool) {
	open := parenBalance(p.src[start:end])
	for ; open > 0; open-- {
		i := skipSpace(p.src, end)
		if i >= len(p.src) || p.src[i] != ')' {
			return 0, 0, false
		}
		end = i + 1
	}
	for ; open < 0; open++ {
		i := start
		for i > 0 && (p.src[i-1] == ' ' || p.src[i-1] == '\t' || p.src[i-1] == '\n' || p.src[i-1] == '\r') {
			i--
		}
		if i == 0 || p.src[i-1] != '(' {
			return 0, 0, false
		}
		start = i - 1
	}
	return start, end, true
}

// parenBalance is the number of "(" minus the number of ")" outside string literals.
func parenBalance(s string) int {
	n := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			n++
		case c == ')':
			n--
		}
	}
	return n
}

func (p *parsed) offsets(n celast.Expr) (int, int, bool) {
	r, ok := p.ast.SourceInfo().GetOffsetRange(n.ID())
	if !ok || r.Stop < r.Start || int(r.Stop) > len(p.src) {
		return 0, 0, false
	}
	return int(r.Start), int(r.Stop), true
}

func (p *parsed) start(n celast.Expr) (int, bool) {
	switch n.Kind() {
	case celast.IdentKind, celast.LiteralKind, celast.ListKind, celast.MapKind:
		s, _, ok := p.offsets(n)
		return s, ok
	case celast.SelectKind:
		return p.start(n.AsSelect().Operand())
	case celast.CallKind:
		call := n.AsCall()
		switch {
		case call.IsMemberFunction():
			return p.start(call.Target())
		case call.FunctionName() == "!_" || call.FunctionName() == "-_":
			s, _, ok := p.offsets(n)
			return s, ok
		case strings.HasPrefix(call.FunctionName(), "_") || call.FunctionName() == "@in":
			if len(call.Args()) == 0 {
				return 0, false
			}
			return p.start(call.Args()[0])
		default: // f(args): the name precedes the parenthesis
			s, _, ok := p.offsets(n)
			if !ok {
				return 0, false
			}
			i := s
			for i > 0 && (isIdentChar(rune(p.src[i-1])) || p.src[i-1] == '.') {
				i--
			}
			return i, i < s
		}
	}
	return 0, false
}

func (p *parsed) end(n celast.Expr) (int, bool) {
	switch n.Kind() {
	case celast.IdentKind, celast.LiteralKind:
		_, e, ok := p.offsets(n)
		return e, ok
	case celast.ListKind:
		return p.closing(n, n.AsList().Elements(), ']')
	case celast.MapKind:
		return 0, false
	case celast.SelectKind:
		s, _, ok := p.offsets(n) // the dot
		if !ok {
			return 0, false
		}
		i := skipSpace(p.src, s+1)
		j := i
		for j < len(p.src) && isIdentChar(rune(p.src[j])) {
			j++
		}
		return j, j > i && p.src[i:j] == n.AsSelect().FieldName()
	case celast.CallKind:
		call := n.AsCall()
		name := call.FunctionName()
		switch {
		case name == "_[_]":
			return p.closing(n, call.Args()[1:], ']')
		case call.IsMemberFunction() || !strings.HasPrefix(name, "_") && name != "@in" && name != "!_" && name != "-_":
			return p.closing(n, call.Args(), ')')
		default:
			args := call.Args()
			if len(args) == 0 {
				return 0, false
			}
			return p.end(args[len(args)-1])
		}
	}
	return 0, false
}

// closing finds the bracket that ends a node after its last argument (or after the opening
// bracket when there are none).
func (p *parsed) closing(n celast.Expr, args []celast.Expr, bracket byte) (int, bool) {
	var from int
	if len(args) > 0 {
		e, ok := p.end(args[len(args)-1])
		if !ok {
			return 0, false
		}
		from = e
	} else {
		s, _, ok := p.offsets(n)
		if !ok {
			return 0, false
		}
		from = s + 1
	}
	i := skipSpace(p.src, from)
	if i < len(p.src) && p.src[i] == ',' {
		i = skipSpace(p.src, i+1)
	}
	if i < len(p.src) && p.src[i] == bracket {
		return i + 1, true
	}
	return 0, false
}

// text is the source of a node, or "" when its span is unknown.
func (p *parsed) text(n celast.Expr) string {
	s, e, ok := p.span(n)
	if !ok {
		return ""
	}
	return p.src[s:e]
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

func isIdentChar(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// edit is a replacement of a byte range of the source.
type edit struct {
	start, end int
	text       string
}

// apply applies non-overlapping edits to src (later edits that overlap earlier ones are
// dropped).
func apply(src string, edits []edit) string {
	var sb strings.Builder
	pos := 0
	for _, e := range sortedEdits(edits) {
		if e.start < pos {
			continue
		}
		sb.WriteString(src[pos:e.start])
		sb.WriteString(e.text)
		pos = e.end
	}
	sb.WriteString(src[pos:])
	return sb.String()
}

func sortedEdits(edits []edit) []edit {
	out := append([]edit(nil), edits...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].start < out[j-1].start; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
