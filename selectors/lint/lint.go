package lint

import (
	"context"
	"fmt"
	"sort"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/internal/celexpr"
	"github.com/gpudra/gpudra/selectors/internal/text"
)

// valueType is the CEL type of a published attribute.
type valueType string

const (
	typeString  valueType = "string"
	typeInt     valueType = "int"
	typeBool    valueType = "bool"
	typeVersion valueType = "version"
)

// Linter finds mistakes in device selectors and the claims, templates and classes that carry
// them, for the gpudra attribute contract and, when it has one, a target machine. A Linter is
// safe for concurrent use.
type Linter struct {
	compiler *selectors.Compiler
	driver   string
	machine  string
	devices  []*selectors.Device
	classes  map[string]*resourceapi.DeviceClass
	// attrs and caps are the names published per domain: the contract's, and the machine's.
	attrs map[string]map[string]valueType
	caps  map[string]map[string]bool
	// models are the MIG-capable GPU models profiles are checked against: the machine's, or the
	// whole catalog without a machine.
	models []*mig.Model
	// templates are the names of Environment.Templates.
	templates []string
}

// NewLinter returns a Linter for an environment: its driver, and its machine when it has one
// (Environment.Slices).
func NewLinter(env Environment) *Linter {
	env = env.WithDefaults()
	l := &Linter{compiler: env.Compiler, driver: env.DriverName, machine: env.Machine, classes: map[string]*resourceapi.DeviceClass{}}
	if env.Slices != nil {
		l.devices = selectors.DevicesFromSlices(env.Slices)
	}
	for _, c := range append(selectors.DeviceClasses(l.driver), env.DeviceClasses...) {
		if c != nil {
			l.classes[c.Name] = c
		}
	}
	for _, t := range env.Templates {
		l.templates = append(l.templates, t.Name)
	}
	l.attrs, l.caps = contractNames(l.driver)
	l.models = l.machineModels()
	for _, d := range l.devices {
		l.learn(d)
	}
	return l
}

// contractNames are the attribute and capacity names of the compatibility contract, and of the
// compute-domain driver's contract (its channel and daemon devices).
func contractNames(driver string) (map[string]map[string]valueType, map[string]map[string]bool) {
	attrs := map[string]map[string]valueType{driver: {}, stdDomain: {}, computedomain.DriverName: {
		computedomain.AttrType: typeString, computedomain.AttrID: typeInt, computedomain.AttrCliqueID: typeString,
	}}
	for _, n := range []resourceapi.QualifiedName{gpudra.AttrType, gpudra.AttrUUID, gpudra.AttrProductName, gpudra.AttrBrand,
		gpudra.AttrArchitecture, gpudra.AttrProfile, gpudra.AttrParentUUID,
		gpudra.AttrNVLinkIsland, gpudra.AttrNVLinkDomain, gpudra.AttrPCIeSwitch} {
		attrs[driver][string(n)] = typeString
	}
	for _, n := range []resourceapi.QualifiedName{gpudra.AttrIndex, gpudra.AttrMinor, gpudra.AttrParentIndex} {
		attrs[driver][string(n)] = typeInt
	}
	for _, n := range []resourceapi.QualifiedName{gpudra.AttrCudaComputeCapability, gpudra.AttrDriverVersion, gpudra.AttrCudaDriverVersion} {
		attrs[driver][string(n)] = typeVersion
	}
	for n, t := range map[resourceapi.QualifiedName]valueType{gpudra.StdAttrPCIBusID: typeString, gpudra.StdAttrPCIeRoot: typeString, gpudra.StdAttrNUMANode: typeInt} {
		_, id := text.SplitQualified(string(n), "")
		attrs[stdDomain][id] = t
	}
	caps := map[string]map[string]bool{driver: {}}
	for _, n := range []resourceapi.QualifiedName{gpudra.CapMemory, gpudra.CapMultiprocessors, gpudra.CapCopyEngines, gpudra.CapDecoders,
		gpudra.CapEncoders, gpudra.CapJpegEngines, gpudra.CapOfaEngines} {
		caps[driver][string(n)] = true
	}
	return attrs, caps
}

// stdDomain is the domain of the standard attributes Kubernetes defines.
const stdDomain = "resource.kubernetes.io"

// learn adds the names a device publishes.
func (l *Linter) learn(d *selectors.Device) {
	for name, a := range d.Device.Attributes {
		domain, id := text.SplitQualified(string(name), d.Driver)
		if l.attrs[domain] == nil {
			l.attrs[domain] = map[string]valueType{}
		}
		if _, ok := l.attrs[domain][id]; !ok {
			l.attrs[domain][id] = attributeType(a)
		}
	}
	for name := range d.Device.Capacity {
		domain, id := text.SplitQualified(string(name), d.Driver)
		if l.caps[domain] == nil {
			l.caps[domain] = map[string]bool{}
		}
		l.caps[domain][id] = true
	}
}

func attributeType(a resourceapi.DeviceAttribute) valueType {
	switch {
	case a.IntValue != nil:
		return typeInt
	case a.BoolValue != nil:
		return typeBool
	case a.VersionValue != nil:
		return typeVersion
	}
	return typeString
}

// machineModels are the MIG-capable GPU models of the machine, or every model of the catalog.
func (l *Linter) machineModels() []*mig.Model {
	if l.devices == nil {
		return mig.Models()
	}
	seen := map[string]bool{}
	var out []*mig.Model
	for _, d := range l.devices {
		if d.Driver != l.driver {
			continue
		}
		a, ok := d.Attribute(gpudra.AttrProductName)
		if !ok || a.StringValue == nil || seen[*a.StringValue] {
			continue
		}
		seen[*a.StringValue] = true
		if m, err := mig.Lookup(*a.StringValue); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// Expression lints one selector on its own (as a DeviceClass or request selector would be,
// without the class around it).
func (l *Linter) Expression(ctx context.Context, expr string) []finding.Finding {
	fs := l.expression(expr)
	if l.devices != nil && !finding.HasErrors(fs) {
		fs = append(fs, l.evaluate(ctx, []string{expr}, nil, "selector")...)
	}
	return fs
}

// expression runs the static rules and the compiler, and makes the fixes mechanical where it
// can: all edits applied together must compile.
func (l *Linter) expression(expr string) []finding.Finding {
	var fs []finding.Finding
	var edits []celexpr.Edit
	if p, ok := celexpr.Parse(celexpr.Env(l.compiler.CELFeatures()), expr); ok {
		fs, edits = l.staticRules(p)
	}
	_, err := l.compiler.Compile(expr)
	if ce := selectors.AsCompileError(err); ce != nil {
		for _, iss := range ce.Issues {
			f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleCompile, Line: iss.Line, Column: iss.Column, Message: iss.Message}
			if ce.Kind == selectors.ErrorTooExpensive {
				f.Suggestion = "simplify the expression: fewer nested macros (all, exists, map) over attribute maps"
			}
			fs = append(fs, f)
		}
	} else if err != nil {
		fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleCompile, Message: err.Error()})
	}
	if len(edits) > 0 {
		fixed := celexpr.Apply(expr, edits)
		if _, err := l.compiler.Compile(fixed); err == nil && fixed != expr {
			for i := range fs {
				if fs[i].Fixed != "" || fs[i].Rule == finding.RuleCompile {
					fs[i].Fixed = fixed
					if fs[i].Rule == finding.RuleCompile && fs[i].Suggestion == "" {
						fs[i].Suggestion = "corrected expression: " + fixed
					}
				}
			}
		} else {
			for i := range fs {
				fs[i].Fixed = ""
			}
		}
	}
	return fs
}

// staticRules looks at every device access of a parsed expression.
func (l *Linter) staticRules(p *celexpr.Parsed) ([]finding.Finding, []celexpr.Edit) {
	var fs []finding.Finding
	var edits []celexpr.Edit
	add := func(f finding.Finding, n celast.Expr, e *celexpr.Edit) {
		if n != nil {
			f.Line, f.Column = p.Position(n)
		}
		if e != nil {
			edits = append(edits, *e)
			f.Fixed = "pending" // replaced by the whole corrected expression, or dropped
		}
		fs = append(fs, f)
	}
	for _, a := range p.Accesses() {
		l.checkAccess(p, a, add)
		if a.Expr.ID() == p.Root.ID() && a.Name != "" && l.attrs[a.Domain][a.Name] != typeBool {
			add(finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleTypeMismatch,
				Message:    fmt.Sprintf("the selector is the value of %s, not a condition: it compiles, but fails on every device that has a non-bool %s", a.Name, a.Name),
				Suggestion: fmt.Sprintf("compare it: %s == '...'", p.Text(a.Expr))}, a.Expr, nil)
		}
	}
	return fs, edits
}

type addFunc func(f finding.Finding, at celast.Expr, e *celexpr.Edit)

func (l *Linter) checkAccess(p *celexpr.Parsed, a celexpr.Access, add addFunc) {
	switch {
	case a.Name == "" && !strings.Contains(a.Domain, "."):
		l.nameAsDomain(p, a, add)
	case a.Name == "":
		if l.unknownDomain(a) {
			add(finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownDomain,
				Message:    fmt.Sprintf("no device publishes %s in domain %q, so device.%s[%q] is empty", a.Kind, a.Domain, a.Kind, a.Domain),
				Suggestion: fmt.Sprintf("the driver's domain is %q", l.driver)}, a.Expr, nil)
		}
	case a.Kind == celexpr.AccessAttribute:
		l.checkAttribute(p, a, add)
	default:
		l.checkCapacity(p, a, add)
	}
}

func (l *Linter) unknownDomain(a celexpr.Access) bool {
	if a.Kind == celexpr.AccessAttribute {
		return l.attrs[a.Domain] == nil
	}
	return l.caps[a.Domain] == nil
}

// nameAsDomain: device.attributes['memory'] reads the domain "memory", not the attribute.
func (l *Linter) nameAsDomain(p *celexpr.Parsed, a celexpr.Access, add addFunc) {
	f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleNameAsDomain,
		Message: fmt.Sprintf("device.%s[%q] is the map of domain %q, not a value: names are looked up as device.%s['<domain>'].<name>", a.Kind, a.Domain, a.Domain, a.Kind)}
	switch {
	case l.caps[l.driver][a.Domain]:
		f.Suggestion = fmt.Sprintf("%s is a capacity: device.capacity[%s].%s", a.Domain, text.Quote(l.driver), a.Domain)
		add(f, a.Expr, l.capacityEdit(p, a, celexpr.AccessCapacity, l.driver, a.Domain))
	case l.attrs[l.driver][a.Domain] != "":
		f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", text.Quote(l.driver), a.Domain)
		add(f, a.Expr, p.Replace(a.Expr, fmt.Sprintf("device.attributes[%s].%s", text.Quote(l.driver), a.Domain)))
	case l.attrs[stdDomain][a.Domain] != "":
		f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", text.Quote(stdDomain), a.Domain)
		add(f, a.Expr, p.Replace(a.Expr, fmt.Sprintf("device.attributes[%s].%s", text.Quote(stdDomain), a.Domain)))
	default:
		f.Suggestion = fmt.Sprintf("the driver publishes attributes %s and capacities %s in domain %q", l.attrNames(l.driver), l.capNames(l.driver), l.driver)
		add(f, a.Expr, nil)
	}
}

func (l *Linter) checkAttribute(p *celexpr.Parsed, a celexpr.Access, add addFunc) {
	if t, ok := l.attrs[a.Domain][a.Name]; ok {
		l.checkComparison(p, a, t, add)
		return
	}
	f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownAttribute}
	switch {
	case l.caps[a.Domain][a.Name]:
		f.Rule = finding.RuleAttributeIsCapacity
		f.Message = fmt.Sprintf("%s is a capacity of %s, not an attribute: device.attributes[%q].%s fails with \"no such key\" on every device", a.Name, a.Domain, a.Domain, a.Name)
		f.Suggestion = fmt.Sprintf("device.capacity[%s].%s, compared with compareTo(quantity('...'))", text.Quote(a.Domain), a.Name)
		add(f, a.Expr, l.capacityEdit(p, a, celexpr.AccessCapacity, a.Domain, a.Name))
	case a.Domain == l.driver && l.attrs[stdDomain][a.Name] != "" || a.Domain == stdDomain && l.attrs[l.driver][a.Name] != "":
		other := stdDomain
		if a.Domain == stdDomain {
			other = l.driver
		}
		f.Rule = finding.RuleWrongDomain
		f.Message = fmt.Sprintf("%s is published in domain %q, not %q", a.Name, other, a.Domain)
		f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", text.Quote(other), a.Name)
		add(f, a.Expr, p.ReplaceDomain(a, other))
	case l.unknownDomain(a):
		f.Rule = finding.RuleUnknownDomain
		f.Message = fmt.Sprintf("no device publishes attributes in domain %q", a.Domain)
		if _, ok := l.attrs[l.driver][a.Name]; ok {
			f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", text.Quote(l.driver), a.Name)
			add(f, a.Expr, p.ReplaceDomain(a, l.driver))
			return
		}
		f.Suggestion = fmt.Sprintf("the driver's domain is %q", l.driver)
		add(f, a.Expr, nil)
	default:
		f.Message = fmt.Sprintf("domain %q publishes no attribute %q (it publishes %s)", a.Domain, a.Name, l.attrNames(a.Domain))
		if alt := text.Closest(a.Name, text.Keys(l.attrs[a.Domain])); alt != "" {
			f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", text.Quote(a.Domain), alt)
			add(f, a.Expr, p.Replace(a.Expr, fmt.Sprintf("device.attributes[%s].%s", text.Quote(a.Domain), alt)))
			return
		}
		add(f, a.Expr, nil)
	}
}

func (l *Linter) checkCapacity(p *celexpr.Parsed, a celexpr.Access, add addFunc) {
	if l.caps[a.Domain][a.Name] {
		l.checkQuantityComparison(p, a, add)
		return
	}
	f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownCapacity}
	switch {
	case l.attrs[a.Domain][a.Name] != "":
		f.Rule = finding.RuleCapacityIsAttribute
		f.Message = fmt.Sprintf("%s is an attribute of %s, not a capacity", a.Name, a.Domain)
		f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", text.Quote(a.Domain), a.Name)
		add(f, a.Expr, p.Replace(a.Expr, f.Suggestion))
	case l.unknownDomain(a):
		f.Rule = finding.RuleUnknownDomain
		f.Message = fmt.Sprintf("no device publishes capacities in domain %q", a.Domain)
		f.Suggestion = fmt.Sprintf("the driver's domain is %q", l.driver)
		add(f, a.Expr, nil)
	default:
		f.Message = fmt.Sprintf("domain %q publishes no capacity %q (it publishes %s)", a.Domain, a.Name, l.capNames(a.Domain))
		add(f, a.Expr, nil)
	}
}

// capacityEdit rewrites an access (and the comparison it is an operand of, when the other side
// is a literal) to a capacity compared as a quantity.
func (l *Linter) capacityEdit(p *celexpr.Parsed, a celexpr.Access, kind celexpr.AccessKind, domain, name string) *celexpr.Edit {
	target := fmt.Sprintf("device.%s[%s].%s", kind, text.Quote(domain), name)
	cmp, ok := celexpr.ComparisonOf(a.Expr)
	if !ok || cmp.Op == "in" {
		return p.Replace(a.Expr, target)
	}
	q, ok := literalQuantity(cmp.Other, name)
	if !ok {
		return p.Replace(a.Expr, target)
	}
	op := cmp.Op
	if !cmp.AccessLeft {
		op = celexpr.Flipped(op)
	}
	return p.Replace(cmp.Call, fmt.Sprintf("%s.compareTo(quantity(%s)) %s 0", target, text.Quote(q), op))
}

// literalQuantity reads a number or string literal as a quantity. A plain number for memory
// below 1Mi is taken as MiB, the unit nvidia-smi reports memory in.
func literalQuantity(n celast.Expr, name string) (string, bool) {
	if n.Kind() != celast.LiteralKind {
		return "", false
	}
	switch v := n.AsLiteral().(type) {
	case types.String:
		q, err := resource.ParseQuantity(string(v))
		if err != nil {
			return "", false
		}
		return q.String(), true
	case types.Int:
		if name == string(gpudra.CapMemory) && v > 0 && v < 1<<20 {
			return fmt.Sprintf("%dMi", int64(v)), true
		}
		return fmt.Sprintf("%d", int64(v)), true
	case types.Uint:
		return fmt.Sprintf("%d", uint64(v)), true
	}
	return "", false
}

// checkQuantityComparison: a capacity is a quantity; compare it with compareTo.
func (l *Linter) checkQuantityComparison(p *celexpr.Parsed, a celexpr.Access, add addFunc) {
	cmp, ok := celexpr.ComparisonOf(a.Expr)
	if !ok || cmp.Op == "in" {
		return
	}
	op := cmp.Op
	if !cmp.AccessLeft {
		op = celexpr.Flipped(op)
	}
	if q, ok := literalQuantity(cmp.Other, a.Name); ok {
		add(finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleQuantityComparison,
			Message:    fmt.Sprintf("capacity %s is a quantity; comparing it with %s does not compile", a.Name, p.Text(cmp.Other)),
			Suggestion: fmt.Sprintf("%s.compareTo(quantity(%s)) %s 0", p.Text(a.Expr), text.Quote(q), op)},
			cmp.Call, p.Replace(cmp.Call, fmt.Sprintf("%s.compareTo(quantity(%s)) %s 0", p.Text(a.Expr), text.Quote(q), op)))
		return
	}
	if (op == "==" || op == "!=") && isCall(cmp.Other, "quantity") {
		add(finding.Finding{Severity: finding.SeverityWarning, Rule: finding.RuleQuantityComparison,
			Message:    fmt.Sprintf("exact %s of capacity %s rarely matches real GPUs (an 80GB H100 reports 81559Mi)", map[string]string{"==": "equality", "!=": "inequality"}[op], a.Name),
			Suggestion: fmt.Sprintf("compare a range: %s.compareTo(%s) >= 0", p.Text(a.Expr), p.Text(cmp.Other))}, cmp.Call, nil)
	}
}

func isCall(n celast.Expr, fn string) bool {
	return n.Kind() == celast.CallKind && n.AsCall().FunctionName() == fn && !n.AsCall().IsMemberFunction()
}

// checkComparison checks what an attribute is compared with.
func (l *Linter) checkComparison(p *celexpr.Parsed, a celexpr.Access, t valueType, add addFunc) {
	if t == typeVersion {
		if parent, ok := a.Expr.Parent(); ok && parent.Kind() == celast.CallKind && parent.AsCall().IsMemberFunction() &&
			parent.AsCall().Target().ID() == a.Expr.ID() && stringFunctions[parent.AsCall().FunctionName()] {
			add(finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleVersionAsString,
				Message:    fmt.Sprintf("%s is a version, not a string: %s() fails on it", a.Name, parent.AsCall().FunctionName()),
				Suggestion: fmt.Sprintf("compare versions: %s.compareTo(semver('X.Y.Z')) >= 0", p.Text(a.Expr))}, parent, nil)
			return
		}
	}
	cmp, ok := celexpr.ComparisonOf(a.Expr)
	if !ok {
		return
	}
	if cmp.Op == "in" && !cmp.AccessLeft {
		return
	}
	lit := cmp.Other
	if lit.Kind() == celast.ListKind {
		for _, e := range lit.Children() {
			l.checkLiteral(p, a, t, cmp, e, add)
		}
		return
	}
	l.checkLiteral(p, a, t, cmp, lit, add)
}

var stringFunctions = map[string]bool{"startsWith": true, "endsWith": true, "contains": true, "matches": true, "lowerAscii": true, "upperAscii": true, "size": false}

func (l *Linter) checkLiteral(p *celexpr.Parsed, a celexpr.Access, t valueType, cmp celexpr.Comparison, lit celast.NavigableExpr, add addFunc) {
	if lit.Kind() != celast.LiteralKind {
		return
	}
	v := lit.AsLiteral()
	if t == typeVersion {
		l.versionLiteral(p, a, cmp, v, add)
		return
	}
	if litType(v) != t {
		f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleTypeMismatch,
			Message: fmt.Sprintf("%s is a %s attribute, compared with the %s %s: == is always false, ordering fails", a.Name, t, litType(v), p.Text(lit))}
		var e *celexpr.Edit
		if t == typeInt {
			if s, ok := v.(types.String); ok {
				var n int64
				if _, err := fmt.Sscanf(string(s), "%d", &n); err == nil && fmt.Sprint(n) == string(s) {
					f.Suggestion = "compare with the number " + string(s)
					e = p.Replace(lit, string(s))
				}
			}
		} else if t == typeString {
			f.Suggestion = "compare with a string: " + text.Quote(fmt.Sprint(v.Value()))
			e = p.Replace(lit, text.Quote(fmt.Sprint(v.Value())))
		}
		add(f, lit, e)
		return
	}
	s, ok := v.(types.String)
	if !ok {
		return
	}
	switch {
	case a.Name == string(gpudra.AttrProfile) && a.Domain == l.driver:
		l.profileLiteral(p, string(s), lit, add)
	case a.Name == string(gpudra.AttrType) && a.Domain == l.driver && string(s) != gpudra.DeviceTypeGPU && string(s) != gpudra.DeviceTypeMIG:
		add(finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownValue,
			Message:    fmt.Sprintf("type is %q or %q, never %q", gpudra.DeviceTypeGPU, gpudra.DeviceTypeMIG, string(s)),
			Suggestion: fmt.Sprintf("type == %q for full GPUs, %q for MIG devices", gpudra.DeviceTypeGPU, gpudra.DeviceTypeMIG)}, lit, nil)
	}
}

func litType(v any) valueType {
	switch v.(type) {
	case types.String:
		return typeString
	case types.Int, types.Uint:
		return typeInt
	case types.Bool:
		return typeBool
	}
	return valueType(fmt.Sprintf("%T", v))
}

// versionLiteral: a version compared with a string or a number compares as a string (or not at
// all).
func (l *Linter) versionLiteral(p *celexpr.Parsed, a celexpr.Access, cmp celexpr.Comparison, v any, add addFunc) {
	var raw string
	switch x := v.(type) {
	case types.String:
		raw = string(x)
	case types.Int:
		raw = fmt.Sprint(int64(x))
	case types.Double:
		raw = fmt.Sprint(float64(x))
	default:
		return
	}
	f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleVersionAsString,
		Message: fmt.Sprintf("%s is a version; compared with %s it is never equal and cannot be ordered", a.Name, p.Text(cmp.Other))}
	norm, err := selectors.NormalizeVersion(raw)
	if err != nil || cmp.Op == "in" {
		f.Suggestion = fmt.Sprintf("compare versions: %s.compareTo(semver('X.Y.Z')) >= 0", p.Text(a.Expr))
		add(f, cmp.Call, nil)
		return
	}
	op := cmp.Op
	if !cmp.AccessLeft {
		op = celexpr.Flipped(op)
	}
	f.Suggestion = fmt.Sprintf("%s.compareTo(semver(%s)) %s 0", p.Text(a.Expr), text.Quote(norm), op)
	add(f, cmp.Call, p.Replace(cmp.Call, f.Suggestion))
}

// profileLiteral checks a profile name against the GPU models of the target machine (or all
// models).
func (l *Linter) profileLiteral(p *celexpr.Parsed, name string, lit celast.NavigableExpr, add addFunc) {
	prof, err := mig.ParseProfile(name)
	if err != nil {
		add(finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownProfile, Message: err.Error(),
			Suggestion: "MIG profile names look like 1g.5gb, 3g.40gb, 1g.10gb+me, 1c.2g.10gb"}, lit, nil)
		return
	}
	for _, m := range l.models {
		if _, ok := m.Profile(prof.GPUInstance().String()); ok {
			return
		}
	}
	where := "any GPU model gpudra knows"
	if l.devices != nil {
		where = "any GPU of " + l.machineName()
	}
	f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownProfile,
		Message: fmt.Sprintf("MIG profile %s does not exist on %s", name, where)}
	var alts []string
	for _, m := range l.models {
		var same []string
		for _, gp := range m.Profiles {
			if gp.ComputeSlices == prof.G && !strings.Contains(gp.Name, "+") && !strings.Contains(gp.Name, "-") {
				same = append(same, gp.Name)
			}
		}
		f.Message += fmt.Sprintf("; %s has %s", m.Name, strings.Join(m.ProfileNames(), ", "))
		alts = append(alts, same...)
	}
	alts = text.Uniq(alts)
	if len(l.models) == 0 {
		f.Message += "; the machine has no MIG-capable GPU"
	}
	if len(alts) == 1 {
		f.Suggestion = fmt.Sprintf("use %s, the %dg profile of this machine", alts[0], prof.G)
		add(f, lit, p.Replace(lit, text.Quote(alts[0])))
		return
	}
	add(f, lit, nil)
}

func (l *Linter) machineName() string {
	if l.machine != "" {
		return l.machine
	}
	return "the target machine"
}

func (l *Linter) attrNames(domain string) string {
	return strings.Join(text.Keys(l.attrs[domain]), ", ")
}

func (l *Linter) capNames(domain string) string {
	var out []string
	for k := range l.caps[domain] {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
