package celexpr

import (
	"fmt"
	"strings"
	"sync"
	"unicode"

	celgo "github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpudra/gpudra/selectors/internal/text"
)

// envs caches the environment of each set of CEL features.
var envs sync.Map // dracel.Features -> *celgo.Env

// Env is the CEL environment the API server validates new selectors in, for a compiler with
// features f (selectors.Compiler.CELFeatures); nil when the upstream compiler has none. Parse
// reads selectors in it.
func Env(f dracel.Features) *celgo.Env {
	if e, ok := envs.Load(f); ok {
		return e.(*celgo.Env)
	}
	newExprs := environment.NewExpressions
	r := dracel.GetCompiler(f).CompileCELExpression("true", dracel.Options{EnvType: &newExprs, DisableCostEstimation: true})
	if r.Environment == nil {
		return nil
	}
	envs.Store(f, r.Environment)
	return r.Environment
}

// Parsed is a selector parsed (not type-checked, so that lint can look into expressions that do
// not compile) with what lint needs to point into its source.
type Parsed struct {
	src string
	// AST is the parsed expression, with its source positions.
	AST *celast.AST
	// Root is the navigable root of AST.
	Root celast.NavigableExpr
}

// Parse parses src in env (Env), without type checking; false when it does not parse.
func Parse(env *celgo.Env, src string) (*Parsed, bool) {
	if env == nil {
		return nil, false
	}
	a, iss := env.Parse(src)
	if iss != nil && iss.Err() != nil {
		return nil, false
	}
	nat := a.NativeRep()
	return &Parsed{src: src, AST: nat, Root: celast.NavigateAST(nat)}, true
}

// AccessKind is the map a device access reads.
type AccessKind string

const (
	// AccessAttribute is a read of device.attributes.
	AccessAttribute AccessKind = "attributes"
	// AccessCapacity is a read of device.capacity.
	AccessCapacity AccessKind = "capacity"
)

// Access is one read of device.attributes or device.capacity.
type Access struct {
	// Kind is the map read.
	Kind AccessKind
	// Domain is the attribute or capacity domain ("gpu.nvidia.com").
	Domain string
	// Name is "" for a domain-only access (device.attributes['x'] used as a value).
	Name string
	// Expr is the node of the whole access (the select or index of the name, or of the domain
	// when name is "").
	Expr celast.NavigableExpr
	// domainLit is the literal (or select field) that names the domain.
	domainLit celast.NavigableExpr
}

// Accesses finds every device.attributes[...] and device.capacity[...] read in the expression.
func (p *Parsed) Accesses() []Access {
	var out []Access
	for _, n := range celast.MatchDescendants(p.Root, celast.AllMatcher()) {
		kind, domain, lit, ok := domainAccess(n)
		if !ok {
			continue
		}
		a := Access{Kind: kind, Domain: domain, Expr: n, domainLit: lit}
		if parent, ok := n.Parent(); ok {
			if name, ok := nameOf(parent, n); ok {
				a.Name, a.Expr = name, parent
			}
		}
		out = append(out, a)
	}
	return out
}

// domainAccess matches device.attributes['domain'] (or device.attributes.domain).
func domainAccess(n celast.NavigableExpr) (AccessKind, string, celast.NavigableExpr, bool) {
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
	switch AccessKind(sel.FieldName()) {
	case AccessAttribute, AccessCapacity:
		return AccessKind(sel.FieldName()), domain, lit, true
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

// Comparison is a comparison with a device access on one side.
type Comparison struct {
	// Op is the operator: "==", "in", ...
	Op string
	// Call is the node of the comparison.
	Call celast.NavigableExpr
	// Other is the side that is not the access.
	Other celast.NavigableExpr
	// AccessLeft is true when the access is the left operand.
	AccessLeft bool
}

// ComparisonOf returns the comparison a node is an operand of.
func ComparisonOf(n celast.NavigableExpr) (Comparison, bool) {
	parent, ok := n.Parent()
	if !ok || parent.Kind() != celast.CallKind {
		return Comparison{}, false
	}
	op, ok := comparisons[parent.AsCall().FunctionName()]
	if !ok || len(parent.AsCall().Args()) != 2 {
		return Comparison{}, false
	}
	kids := parent.Children()
	if len(kids) != 2 {
		return Comparison{}, false
	}
	if kids[0].ID() == n.ID() {
		return Comparison{Op: op, Call: parent, Other: kids[1], AccessLeft: true}, true
	}
	return Comparison{Op: op, Call: parent, Other: kids[0]}, true
}

// Flipped is the operator with its operands swapped (a < b is b > a).
func Flipped(op string) string {
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

// LiteralStrings returns the string literals of a literal or a list of literals.
func LiteralStrings(n celast.NavigableExpr) []string {
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
func (p *Parsed) span(n celast.Expr) (start, end int, ok bool) {
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
func (p *Parsed) balance(start, end int) (int, int, bool) {
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

func (p *Parsed) offsets(n celast.Expr) (int, int, bool) {
	r, ok := p.AST.SourceInfo().GetOffsetRange(n.ID())
	if !ok || r.Stop < r.Start || int(r.Stop) > len(p.src) {
		return 0, 0, false
	}
	return int(r.Start), int(r.Stop), true
}

func (p *Parsed) start(n celast.Expr) (int, bool) {
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

func (p *Parsed) end(n celast.Expr) (int, bool) {
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
func (p *Parsed) closing(n celast.Expr, args []celast.Expr, bracket byte) (int, bool) {
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

// Text is the source of a node, or "" when its span is unknown.
func (p *Parsed) Text(n celast.Expr) string {
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

// Edit is a replacement of a byte range of the source.
type Edit struct {
	start, end int
	text       string
}

// Apply applies non-overlapping edits to src (later edits that overlap earlier ones are
// dropped).
func Apply(src string, edits []Edit) string {
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

func sortedEdits(edits []Edit) []Edit {
	out := append([]Edit(nil), edits...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].start < out[j-1].start; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// Position is the 1-based line and column of a node's first character.
func (p *Parsed) Position(n celast.Expr) (int, int) {
	s, _, ok := p.span(n)
	if !ok {
		r, found := p.AST.SourceInfo().GetOffsetRange(n.ID())
		if !found {
			return 0, 0
		}
		s = int(r.Start)
	}
	loc := p.AST.SourceInfo().GetLocationByOffset(int32(s))
	return loc.Line(), loc.Column() + 1
}

// Replace is an edit replacing a node's source, or nil when its span is unknown.
func (p *Parsed) Replace(n celast.Expr, text string) *Edit {
	s, e, ok := p.span(n)
	if !ok {
		return nil
	}
	return &Edit{start: s, end: e, text: text}
}

// ReplaceDomain replaces the domain of an access.
func (p *Parsed) ReplaceDomain(a Access, domain string) *Edit {
	if a.domainLit != nil {
		return p.Replace(a.domainLit, text.Quote(domain))
	}
	return p.Replace(a.Expr, fmt.Sprintf("device.%s[%s].%s", a.Kind, text.Quote(domain), a.Name))
}
