package selectors

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
	"github.com/gpudra/gpudra/mig"
)

// Severity says how bad a finding is.
type Severity string

const (
	// SeverityError is a mistake: the object is rejected, or never allocates what it means to.
	SeverityError Severity = "error"
	// SeverityWarning is probably a mistake.
	SeverityWarning Severity = "warning"
	// SeverityInfo is worth knowing (a redundant selector, an applied upgrade).
	SeverityInfo Severity = "info"
)

// Rule names, as they appear in findings.
const (
	// RuleCompile: the expression does not compile (syntax, types, result type, cost, length).
	RuleCompile = "compile"
	// RuleAttributeIsCapacity: a capacity (memory) read as device.attributes[...].
	RuleAttributeIsCapacity = "attribute-is-capacity"
	// RuleCapacityIsAttribute: an attribute read as device.capacity[...].
	RuleCapacityIsAttribute = "capacity-is-attribute"
	// RuleNameAsDomain: device.attributes['memory'] reads the domain "memory", not a name.
	RuleNameAsDomain = "name-as-domain"
	// RuleUnknownAttribute: a name the domain does not publish.
	RuleUnknownAttribute = "unknown-attribute"
	// RuleUnknownCapacity: a capacity the domain does not publish.
	RuleUnknownCapacity = "unknown-capacity"
	// RuleUnknownDomain: a domain no device publishes.
	RuleUnknownDomain = "unknown-domain"
	// RuleWrongDomain: a name published in another domain (pcieRoot in the driver's domain).
	RuleWrongDomain = "wrong-domain"
	// RuleUnknownProfile: a MIG profile that exists on no GPU of the target machine (or of
	// any model, without one), or that is not a profile name.
	RuleUnknownProfile = "unknown-profile"
	// RuleUnknownValue: a value the attribute never has (type 'GPU').
	RuleUnknownValue = "unknown-value"
	// RuleVersionAsString: a version attribute compared with a string or a number.
	RuleVersionAsString = "version-as-string"
	// RuleTypeMismatch: an attribute compared with a literal of another type, or used as the
	// whole condition.
	RuleTypeMismatch = "type-mismatch"
	// RuleQuantityComparison: a capacity compared with a number or string, or with == / !=.
	RuleQuantityComparison = "quantity-comparison"
	// RuleMatchesNothing: the selectors match no device of the target machine.
	RuleMatchesNothing = "matches-nothing"
	// RuleMatchesEverything: the request's selectors match every device its class selects.
	RuleMatchesEverything = "matches-everything"
	// RuleRuntimeError: evaluation fails on a device of the target machine, which makes the
	// scheduler give up on the claim for that node.
	RuleRuntimeError = "runtime-error"
	// RuleWrongClass: a selector reads an attribute the devices of its request's class never
	// publish (profile in the full-GPU class, minor in the MIG class).
	RuleWrongClass = "wrong-class"
	// RuleMissingExactly: a request with neither exactly nor firstAvailable.
	RuleMissingExactly = "missing-exactly"
	// RuleUnqualifiedName: a constraint attribute without a domain that resolves to the
	// driver's domain, where it is not published.
	RuleUnqualifiedName = "unqualified-name"
	// RuleUnknownClass: a DeviceClass that does not exist.
	RuleUnknownClass = "unknown-class"
	// RuleUnknownRequest: a constraint or config naming a request the claim does not have.
	RuleUnknownRequest = "unknown-request"
	// RuleInvalidConfig: the driver's opaque configuration does not decode.
	RuleInvalidConfig = "invalid-config"
	// RuleMissingReference: a pod uses a claim or template the manifest does not define, or a
	// container uses a claim the pod does not declare.
	RuleMissingReference = "missing-reference"
	// RuleUpgrade: what upgrading the manifest to resource.k8s.io/v1 changed or could not.
	RuleUpgrade = "upgrade"
	// RuleDecode: an object that does not decode strictly.
	RuleDecode = "decode"
)

// Finding is one problem lint found.
type Finding struct {
	Severity Severity `json:"severity"`
	Rule     string   `json:"rule"`
	// Object is the object the finding is about ("ResourceClaimTemplate default/mig-small"),
	// empty for a bare expression.
	Object string `json:"object,omitempty"`
	// Field is the field path in the object
	// ("spec.spec.devices.requests[0].exactly.selectors[0].cel.expression").
	Field string `json:"field,omitempty"`
	// Line and Column point into the expression (1-based; 0 when unknown).
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
	// Message says what is wrong.
	Message string `json:"message"`
	// Suggestion says what to do instead.
	Suggestion string `json:"suggestion,omitempty"`
	// Fixed is the corrected expression when the fix is mechanical; it always compiles.
	Fixed string `json:"fixed,omitempty"`
}

// String formats a finding on one line.
func (f Finding) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s [%s]", f.Severity, f.Rule)
	if f.Object != "" {
		fmt.Fprintf(&sb, " %s", f.Object)
	}
	if f.Field != "" {
		fmt.Fprintf(&sb, " %s", f.Field)
	}
	if f.Line > 0 {
		fmt.Fprintf(&sb, ":%d:%d", f.Line, f.Column)
	}
	fmt.Fprintf(&sb, ": %s", f.Message)
	if f.Suggestion != "" {
		fmt.Fprintf(&sb, " (fix: %s)", f.Suggestion)
	}
	return sb.String()
}

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
	compiler *Compiler
	driver   string
	machine  string
	devices  []*Device
	classes  map[string]*resourceapi.DeviceClass
	// attrs and caps are the names published per domain: the contract's, and the machine's.
	attrs map[string]map[string]valueType
	caps  map[string]map[string]bool
	// models are the MIG-capable GPU models profiles are checked against: the machine's, or the
	// whole catalog without a machine.
	models []*mig.Model
}

// NewLinter returns a Linter for an environment: its driver, and its machine when it has one
// (Environment.Slices).
func NewLinter(env Environment) *Linter {
	env = env.withDefaults()
	l := &Linter{compiler: env.Compiler, driver: env.DriverName, machine: env.Machine, classes: map[string]*resourceapi.DeviceClass{}}
	if env.Slices != nil {
		l.devices = DevicesFromSlices(env.Slices)
	}
	for _, c := range append(DeviceClasses(l.driver), env.DeviceClasses...) {
		if c != nil {
			l.classes[c.Name] = c
		}
	}
	l.attrs, l.caps = contractNames(l.driver)
	l.models = l.machineModels()
	for _, d := range l.devices {
		l.learn(d)
	}
	return l
}

// contractNames are the attribute and capacity names of the compatibility contract.
func contractNames(driver string) (map[string]map[string]valueType, map[string]map[string]bool) {
	attrs := map[string]map[string]valueType{driver: {}, stdDomain: {}}
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
		_, id := splitQualified(string(n), "")
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
func (l *Linter) learn(d *Device) {
	for name, a := range d.Device.Attributes {
		domain, id := splitQualified(string(name), d.Driver)
		if l.attrs[domain] == nil {
			l.attrs[domain] = map[string]valueType{}
		}
		if _, ok := l.attrs[domain][id]; !ok {
			l.attrs[domain][id] = attributeType(a)
		}
	}
	for name := range d.Device.Capacity {
		domain, id := splitQualified(string(name), d.Driver)
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
func (l *Linter) Expression(ctx context.Context, expr string) []Finding {
	fs := l.expression(expr)
	if l.devices != nil && !hasErrors(fs) {
		fs = append(fs, l.evaluate(ctx, []string{expr}, nil, "selector")...)
	}
	return fs
}

// expression runs the static rules and the compiler, and makes the fixes mechanical where it
// can: all edits applied together must compile.
func (l *Linter) expression(expr string) []Finding {
	var fs []Finding
	var edits []edit
	if p, ok := parseExpression(l.compiler.validationEnv(), expr); ok {
		fs, edits = l.staticRules(p)
	}
	_, err := l.compiler.Compile(expr)
	if ce := AsCompileError(err); ce != nil {
		for _, iss := range ce.Issues {
			f := Finding{Severity: SeverityError, Rule: RuleCompile, Line: iss.Line, Column: iss.Column, Message: iss.Message}
			if ce.Kind == ErrorTooExpensive {
				f.Suggestion = "simplify the expression: fewer nested macros (all, exists, map) over attribute maps"
			}
			fs = append(fs, f)
		}
	} else if err != nil {
		fs = append(fs, Finding{Severity: SeverityError, Rule: RuleCompile, Message: err.Error()})
	}
	if len(edits) > 0 {
		fixed := apply(expr, edits)
		if _, err := l.compiler.Compile(fixed); err == nil && fixed != expr {
			for i := range fs {
				if fs[i].Fixed != "" || fs[i].Rule == RuleCompile {
					fs[i].Fixed = fixed
					if fs[i].Rule == RuleCompile && fs[i].Suggestion == "" {
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

func hasErrors(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == SeverityError {
			return true
		}
	}
	return false
}

// staticRules looks at every device access of a parsed expression.
func (l *Linter) staticRules(p *parsed) ([]Finding, []edit) {
	var fs []Finding
	var edits []edit
	add := func(f Finding, n celast.Expr, e *edit) {
		if n != nil {
			f.Line, f.Column = p.position(n)
		}
		if e != nil {
			edits = append(edits, *e)
			f.Fixed = "pending" // replaced by the whole corrected expression, or dropped
		}
		fs = append(fs, f)
	}
	for _, a := range p.accesses() {
		l.checkAccess(p, a, add)
		if a.expr.ID() == p.root.ID() && a.name != "" && l.attrs[a.domain][a.name] != typeBool {
			add(Finding{Severity: SeverityError, Rule: RuleTypeMismatch,
				Message:    fmt.Sprintf("the selector is the value of %s, not a condition: it compiles, but fails on every device that has a non-bool %s", a.name, a.name),
				Suggestion: fmt.Sprintf("compare it: %s == '...'", p.text(a.expr))}, a.expr, nil)
		}
	}
	return fs, edits
}

type addFunc func(f Finding, at celast.Expr, e *edit)

func (l *Linter) checkAccess(p *parsed, a access, add addFunc) {
	switch {
	case a.name == "" && !strings.Contains(a.domain, "."):
		l.nameAsDomain(p, a, add)
	case a.name == "":
		if l.unknownDomain(a) {
			add(Finding{Severity: SeverityError, Rule: RuleUnknownDomain,
				Message:    fmt.Sprintf("no device publishes %s in domain %q, so device.%s[%q] is empty", a.kind, a.domain, a.kind, a.domain),
				Suggestion: fmt.Sprintf("the driver's domain is %q", l.driver)}, a.expr, nil)
		}
	case a.kind == accessAttribute:
		l.checkAttribute(p, a, add)
	default:
		l.checkCapacity(p, a, add)
	}
}

func (l *Linter) unknownDomain(a access) bool {
	if a.kind == accessAttribute {
		return l.attrs[a.domain] == nil
	}
	return l.caps[a.domain] == nil
}

// nameAsDomain: device.attributes['memory'] reads the domain "memory", not the attribute.
func (l *Linter) nameAsDomain(p *parsed, a access, add addFunc) {
	f := Finding{Severity: SeverityError, Rule: RuleNameAsDomain,
		Message: fmt.Sprintf("device.%s[%q] is the map of domain %q, not a value: names are looked up as device.%s['<domain>'].<name>", a.kind, a.domain, a.domain, a.kind)}
	switch {
	case l.caps[l.driver][a.domain]:
		f.Suggestion = fmt.Sprintf("%s is a capacity: device.capacity[%s].%s", a.domain, quote(l.driver), a.domain)
		add(f, a.expr, l.capacityEdit(p, a, accessCapacity, l.driver, a.domain))
	case l.attrs[l.driver][a.domain] != "":
		f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", quote(l.driver), a.domain)
		add(f, a.expr, p.replace(a.expr, fmt.Sprintf("device.attributes[%s].%s", quote(l.driver), a.domain)))
	case l.attrs[stdDomain][a.domain] != "":
		f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", quote(stdDomain), a.domain)
		add(f, a.expr, p.replace(a.expr, fmt.Sprintf("device.attributes[%s].%s", quote(stdDomain), a.domain)))
	default:
		f.Suggestion = fmt.Sprintf("the driver publishes attributes %s and capacities %s in domain %q", l.attrNames(l.driver), l.capNames(l.driver), l.driver)
		add(f, a.expr, nil)
	}
}

func (l *Linter) checkAttribute(p *parsed, a access, add addFunc) {
	if t, ok := l.attrs[a.domain][a.name]; ok {
		l.checkComparison(p, a, t, add)
		return
	}
	f := Finding{Severity: SeverityError, Rule: RuleUnknownAttribute}
	switch {
	case l.caps[a.domain][a.name]:
		f.Rule = RuleAttributeIsCapacity
		f.Message = fmt.Sprintf("%s is a capacity of %s, not an attribute: device.attributes[%q].%s fails with \"no such key\" on every device", a.name, a.domain, a.domain, a.name)
		f.Suggestion = fmt.Sprintf("device.capacity[%s].%s, compared with compareTo(quantity('...'))", quote(a.domain), a.name)
		add(f, a.expr, l.capacityEdit(p, a, accessCapacity, a.domain, a.name))
	case a.domain == l.driver && l.attrs[stdDomain][a.name] != "" || a.domain == stdDomain && l.attrs[l.driver][a.name] != "":
		other := stdDomain
		if a.domain == stdDomain {
			other = l.driver
		}
		f.Rule = RuleWrongDomain
		f.Message = fmt.Sprintf("%s is published in domain %q, not %q", a.name, other, a.domain)
		f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", quote(other), a.name)
		add(f, a.expr, p.replaceDomain(a, other))
	case l.unknownDomain(a):
		f.Rule = RuleUnknownDomain
		f.Message = fmt.Sprintf("no device publishes attributes in domain %q", a.domain)
		if _, ok := l.attrs[l.driver][a.name]; ok {
			f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", quote(l.driver), a.name)
			add(f, a.expr, p.replaceDomain(a, l.driver))
			return
		}
		f.Suggestion = fmt.Sprintf("the driver's domain is %q", l.driver)
		add(f, a.expr, nil)
	default:
		f.Message = fmt.Sprintf("domain %q publishes no attribute %q (it publishes %s)", a.domain, a.name, l.attrNames(a.domain))
		if alt := closest(a.name, keys(l.attrs[a.domain])); alt != "" {
			f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", quote(a.domain), alt)
			add(f, a.expr, p.replace(a.expr, fmt.Sprintf("device.attributes[%s].%s", quote(a.domain), alt)))
			return
		}
		add(f, a.expr, nil)
	}
}

func (l *Linter) checkCapacity(p *parsed, a access, add addFunc) {
	if l.caps[a.domain][a.name] {
		l.checkQuantityComparison(p, a, add)
		return
	}
	f := Finding{Severity: SeverityError, Rule: RuleUnknownCapacity}
	switch {
	case l.attrs[a.domain][a.name] != "":
		f.Rule = RuleCapacityIsAttribute
		f.Message = fmt.Sprintf("%s is an attribute of %s, not a capacity", a.name, a.domain)
		f.Suggestion = fmt.Sprintf("device.attributes[%s].%s", quote(a.domain), a.name)
		add(f, a.expr, p.replace(a.expr, f.Suggestion))
	case l.unknownDomain(a):
		f.Rule = RuleUnknownDomain
		f.Message = fmt.Sprintf("no device publishes capacities in domain %q", a.domain)
		f.Suggestion = fmt.Sprintf("the driver's domain is %q", l.driver)
		add(f, a.expr, nil)
	default:
		f.Message = fmt.Sprintf("domain %q publishes no capacity %q (it publishes %s)", a.domain, a.name, l.capNames(a.domain))
		add(f, a.expr, nil)
	}
}

// capacityEdit rewrites an access (and the comparison it is an operand of, when the other side
// is a literal) to a capacity compared as a quantity.
func (l *Linter) capacityEdit(p *parsed, a access, kind accessKind, domain, name string) *edit {
	target := fmt.Sprintf("device.%s[%s].%s", kind, quote(domain), name)
	cmp, ok := comparisonOf(a.expr)
	if !ok || cmp.op == "in" {
		return p.replace(a.expr, target)
	}
	q, ok := literalQuantity(cmp.other, name)
	if !ok {
		return p.replace(a.expr, target)
	}
	op := cmp.op
	if !cmp.accessLeft {
		op = flipped(op)
	}
	return p.replace(cmp.call, fmt.Sprintf("%s.compareTo(quantity(%s)) %s 0", target, quote(q), op))
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
func (l *Linter) checkQuantityComparison(p *parsed, a access, add addFunc) {
	cmp, ok := comparisonOf(a.expr)
	if !ok || cmp.op == "in" {
		return
	}
	op := cmp.op
	if !cmp.accessLeft {
		op = flipped(op)
	}
	if q, ok := literalQuantity(cmp.other, a.name); ok {
		add(Finding{Severity: SeverityError, Rule: RuleQuantityComparison,
			Message:    fmt.Sprintf("capacity %s is a quantity; comparing it with %s does not compile", a.name, p.text(cmp.other)),
			Suggestion: fmt.Sprintf("%s.compareTo(quantity(%s)) %s 0", p.text(a.expr), quote(q), op)},
			cmp.call, p.replace(cmp.call, fmt.Sprintf("%s.compareTo(quantity(%s)) %s 0", p.text(a.expr), quote(q), op)))
		return
	}
	if (op == "==" || op == "!=") && isCall(cmp.other, "quantity") {
		add(Finding{Severity: SeverityWarning, Rule: RuleQuantityComparison,
			Message:    fmt.Sprintf("exact %s of capacity %s rarely matches real GPUs (an 80GB H100 reports 81559Mi)", map[string]string{"==": "equality", "!=": "inequality"}[op], a.name),
			Suggestion: fmt.Sprintf("compare a range: %s.compareTo(%s) >= 0", p.text(a.expr), p.text(cmp.other))}, cmp.call, nil)
	}
}

func isCall(n celast.Expr, fn string) bool {
	return n.Kind() == celast.CallKind && n.AsCall().FunctionName() == fn && !n.AsCall().IsMemberFunction()
}

// checkComparison checks what an attribute is compared with.
func (l *Linter) checkComparison(p *parsed, a access, t valueType, add addFunc) {
	if t == typeVersion {
		if parent, ok := a.expr.Parent(); ok && parent.Kind() == celast.CallKind && parent.AsCall().IsMemberFunction() &&
			parent.AsCall().Target().ID() == a.expr.ID() && stringFunctions[parent.AsCall().FunctionName()] {
			add(Finding{Severity: SeverityError, Rule: RuleVersionAsString,
				Message:    fmt.Sprintf("%s is a version, not a string: %s() fails on it", a.name, parent.AsCall().FunctionName()),
				Suggestion: fmt.Sprintf("compare versions: %s.compareTo(semver('X.Y.Z')) >= 0", p.text(a.expr))}, parent, nil)
			return
		}
	}
	cmp, ok := comparisonOf(a.expr)
	if !ok {
		return
	}
	if cmp.op == "in" && !cmp.accessLeft {
		return
	}
	lit := cmp.other
	if lit.Kind() == celast.ListKind {
		for _, e := range lit.Children() {
			l.checkLiteral(p, a, t, cmp, e, add)
		}
		return
	}
	l.checkLiteral(p, a, t, cmp, lit, add)
}

var stringFunctions = map[string]bool{"startsWith": true, "endsWith": true, "contains": true, "matches": true, "lowerAscii": true, "upperAscii": true, "size": false}

func (l *Linter) checkLiteral(p *parsed, a access, t valueType, cmp comparison, lit celast.NavigableExpr, add addFunc) {
	if lit.Kind() != celast.LiteralKind {
		return
	}
	v := lit.AsLiteral()
	if t == typeVersion {
		l.versionLiteral(p, a, cmp, v, add)
		return
	}
	if litType(v) != t {
		f := Finding{Severity: SeverityError, Rule: RuleTypeMismatch,
			Message: fmt.Sprintf("%s is a %s attribute, compared with the %s %s: == is always false, ordering fails", a.name, t, litType(v), p.text(lit))}
		var e *edit
		if t == typeInt {
			if s, ok := v.(types.String); ok {
				var n int64
				if _, err := fmt.Sscanf(string(s), "%d", &n); err == nil && fmt.Sprint(n) == string(s) {
					f.Suggestion = "compare with the number " + string(s)
					e = p.replace(lit, string(s))
				}
			}
		} else if t == typeString {
			f.Suggestion = "compare with a string: " + quote(fmt.Sprint(v.Value()))
			e = p.replace(lit, quote(fmt.Sprint(v.Value())))
		}
		add(f, lit, e)
		return
	}
	s, ok := v.(types.String)
	if !ok {
		return
	}
	switch {
	case a.name == string(gpudra.AttrProfile) && a.domain == l.driver:
		l.profileLiteral(p, string(s), lit, add)
	case a.name == string(gpudra.AttrType) && a.domain == l.driver && string(s) != gpudra.DeviceTypeGPU && string(s) != gpudra.DeviceTypeMIG:
		add(Finding{Severity: SeverityError, Rule: RuleUnknownValue,
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
func (l *Linter) versionLiteral(p *parsed, a access, cmp comparison, v any, add addFunc) {
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
	f := Finding{Severity: SeverityError, Rule: RuleVersionAsString,
		Message: fmt.Sprintf("%s is a version; compared with %s it is never equal and cannot be ordered", a.name, p.text(cmp.other))}
	norm, err := NormalizeVersion(raw)
	if err != nil || cmp.op == "in" {
		f.Suggestion = fmt.Sprintf("compare versions: %s.compareTo(semver('X.Y.Z')) >= 0", p.text(a.expr))
		add(f, cmp.call, nil)
		return
	}
	op := cmp.op
	if !cmp.accessLeft {
		op = flipped(op)
	}
	f.Suggestion = fmt.Sprintf("%s.compareTo(semver(%s)) %s 0", p.text(a.expr), quote(norm), op)
	add(f, cmp.call, p.replace(cmp.call, f.Suggestion))
}

// profileLiteral checks a profile name against the GPU models of the target machine (or all
// models).
func (l *Linter) profileLiteral(p *parsed, name string, lit celast.NavigableExpr, add addFunc) {
	prof, err := mig.ParseProfile(name)
	if err != nil {
		add(Finding{Severity: SeverityError, Rule: RuleUnknownProfile, Message: err.Error(),
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
	f := Finding{Severity: SeverityError, Rule: RuleUnknownProfile,
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
	alts = uniq(alts)
	if len(l.models) == 0 {
		f.Message += "; the machine has no MIG-capable GPU"
	}
	if len(alts) == 1 {
		f.Suggestion = fmt.Sprintf("use %s, the %dg profile of this machine", alts[0], prof.G)
		add(f, lit, p.replace(lit, quote(alts[0])))
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

// position is the 1-based line and column of a node's first character.
func (p *parsed) position(n celast.Expr) (int, int) {
	s, _, ok := p.span(n)
	if !ok {
		r, found := p.ast.SourceInfo().GetOffsetRange(n.ID())
		if !found {
			return 0, 0
		}
		s = int(r.Start)
	}
	loc := p.ast.SourceInfo().GetLocationByOffset(int32(s))
	return loc.Line(), loc.Column() + 1
}

// replace is an edit replacing a node's source, or nil when its span is unknown.
func (p *parsed) replace(n celast.Expr, text string) *edit {
	s, e, ok := p.span(n)
	if !ok {
		return nil
	}
	return &edit{start: s, end: e, text: text}
}

// replaceDomain replaces the domain of an access.
func (p *parsed) replaceDomain(a access, domain string) *edit {
	if a.domainLit != nil {
		return p.replace(a.domainLit, quote(domain))
	}
	return p.replace(a.expr, fmt.Sprintf("device.%s[%s].%s", a.kind, quote(domain), a.name))
}

func (l *Linter) attrNames(domain string) string { return strings.Join(keys(l.attrs[domain]), ", ") }

func (l *Linter) capNames(domain string) string {
	var out []string
	for k := range l.caps[domain] {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// closest returns the candidate nearest to name (case-insensitive edit distance at most a
// third of the name, at least 2), or a known synonym; "" when none is close.
func closest(name string, candidates []string) string {
	synonyms := map[string]string{"model": "productName", "product": "productName", "name": "productName",
		"arch": "architecture", "computeCapability": "cudaComputeCapability", "cc": "cudaComputeCapability",
		"driver": "driverVersion", "cudaVersion": "cudaDriverVersion", "cudaRuntimeVersion": "cudaDriverVersion",
		"migProfile": "profile", "parent": "parentUUID"}
	if s, ok := synonyms[name]; ok {
		for _, c := range candidates {
			if c == s {
				return s
			}
		}
	}
	best, bestD := "", max(2, len(name)/3)+1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(name), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" || len(name) < 4 {
		return best
	}
	// A name with letters left out ("resourceName" for "resourceClassName").
	for _, c := range candidates {
		if len(c) <= 2*len(name) && isSubsequence(strings.ToLower(name), strings.ToLower(c)) && (best == "" || len(c) < len(best)) {
			best = c
		}
	}
	return best
}

func isSubsequence(s, of string) bool {
	i := 0
	for j := 0; i < len(s) && j < len(of); j++ {
		if s[i] == of[j] {
			i++
		}
	}
	return i == len(s)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
