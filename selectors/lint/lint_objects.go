package lint

import (
	"context"
	"fmt"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/internal/celexpr"
	"github.com/gpudra/gpudra/selectors/internal/text"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// Objects lints the DeviceClasses, ResourceClaims and ResourceClaimTemplates of a manifest and
// the references of its Pods, Deployments and Jobs. Expression findings carry the object and
// field path of the expression.
func (l *Linter) Objects(ctx context.Context, objs []manifest.Object) []finding.Finding {
	classes := map[string]*resourceapi.DeviceClass{}
	for n, c := range l.classes {
		classes[n] = c
	}
	for _, o := range objs {
		if c, ok := o.Object.(*resourceapi.DeviceClass); ok {
			classes[c.Name] = c
		}
	}
	var fs []finding.Finding
	for _, o := range objs {
		switch obj := o.Object.(type) {
		case *resourceapi.DeviceClass:
			fs = append(fs, l.deviceClass(ctx, o, obj)...)
		case *resourceapi.ResourceClaim, *resourceapi.ResourceClaimTemplate:
			spec, path := manifest.ClaimSpec(obj)
			fs = append(fs, l.claimSpec(ctx, o, spec, field.NewPath(path), classes)...)
		default:
			fs = append(fs, l.podReferences(o, objs)...)
		}
	}
	return fs
}

func (l *Linter) deviceClass(ctx context.Context, o manifest.Object, c *resourceapi.DeviceClass) []finding.Finding {
	var fs []finding.Finding
	var exprs []string
	for i, s := range c.Spec.Selectors {
		if s.CEL == nil {
			continue
		}
		path := field.NewPath("spec", "selectors").Index(i).Child("cel", "expression")
		efs := l.expression(s.CEL.Expression)
		fs = append(fs, located(efs, o, path)...)
		if !finding.HasErrors(efs) {
			exprs = append(exprs, s.CEL.Expression)
		}
	}
	if l.devices != nil && len(exprs) == len(c.Spec.Selectors) {
		fs = append(fs, located(l.evaluate(ctx, exprs, nil, "class "+c.Name), o, field.NewPath("spec", "selectors"))...)
	}
	for i, cfg := range c.Spec.Config {
		fs = append(fs, l.opaque(o, cfg.Opaque, field.NewPath("spec", "config").Index(i).Child("opaque"))...)
	}
	return fs
}

func (l *Linter) claimSpec(ctx context.Context, o manifest.Object, spec *resourceapi.ResourceClaimSpec, path *field.Path, classes map[string]*resourceapi.DeviceClass) []finding.Finding {
	var fs []finding.Finding
	reqPath := path.Child("devices", "requests")
	names := sets.New[string]()
	for i, r := range spec.Devices.Requests {
		names.Insert(r.Name)
		p := reqPath.Index(i)
		switch {
		case r.Exactly != nil:
			fs = append(fs, l.request(ctx, o, r.Exactly.DeviceClassName, r.Exactly.Selectors, p.Child("exactly"), classes)...)
		case len(r.FirstAvailable) > 0:
			var alts []finding.Finding
			nothing := 0
			for j, sub := range r.FirstAvailable {
				names.Insert(r.Name + "/" + sub.Name)
				sfs := l.request(ctx, o, sub.DeviceClassName, sub.Selectors, p.Child("firstAvailable").Index(j), classes)
				for _, f := range sfs {
					if f.Rule == finding.RuleMatchesNothing {
						nothing++
						break
					}
				}
				alts = append(alts, sfs...)
			}
			if nothing < len(r.FirstAvailable) {
				lastField := p.Child("firstAvailable").Index(len(r.FirstAvailable) - 1).Child("selectors").String()
				for i := range alts {
					if alts[i].Rule != finding.RuleMatchesNothing {
						continue
					}
					if alts[i].Field == lastField {
						// The fallback itself can never be allocated here: it only looks like one.
						alts[i].Message += fmt.Sprintf("; it is the last choice of request %q, so it is never a fallback on %s", r.Name, l.machineName())
						alts[i].Suggestion = "remove it, or end the list with a choice this machine has"
						continue
					}
					// An earlier alternative that does not exist on this machine is what
					// alternatives are for.
					alts[i].Severity = finding.SeverityInfo
				}
			}
			fs = append(fs, alts...)
		default:
			fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleMissingExactly, Object: o.String(), Field: p.String(),
				Message:    fmt.Sprintf("request %q has neither exactly nor firstAvailable: the resource.k8s.io/v1 API rejects it", r.Name),
				Suggestion: "put deviceClassName, selectors, count and allocationMode under exactly: (the v1beta1 fields moved there in v1)"})
		}
	}
	for i, c := range spec.Devices.Constraints {
		fs = append(fs, l.constraint(o, c, names, path.Child("devices", "constraints").Index(i))...)
	}
	for i, c := range spec.Devices.Config {
		p := path.Child("devices", "config").Index(i)
		for j, r := range c.Requests {
			if !names.Has(r) && !names.Has(strings.SplitN(r, "/", 2)[0]) {
				fs = append(fs, unknownRequest(o, p.Child("requests").Index(j), r, names))
			}
		}
		fs = append(fs, l.opaque(o, c.Opaque, p.Child("opaque"))...)
		fs = append(fs, l.configFits(o, spec, c, p)...)
	}
	return fs
}

// configFits checks a claim's opaque configuration against the class of each request it names:
// the driver refuses at prepare a MigDeviceConfig for a full GPU and a GpuConfig for a MIG device
// (sharing.Resolve), so a request of the driver's full-GPU class with a MigDeviceConfig, or of its
// MIG class with a GpuConfig, can never start. A config that names no request applies only where
// it fits and is not judged.
func (l *Linter) configFits(o manifest.Object, spec *resourceapi.ResourceClaimSpec, c resourceapi.DeviceClaimConfiguration, path *field.Path) []finding.Finding {
	if c.Opaque == nil || c.Opaque.Driver != l.driver || len(c.Requests) == 0 {
		return nil
	}
	cfg, err := v1beta1.NewDecoder().DecodeRaw(c.Opaque.Parameters)
	if err != nil {
		return nil // l.opaque reports it
	}
	kind := cfg.GetObjectKind().GroupVersionKind().Kind
	classes := selectors.DeviceClasses(l.driver)
	wrong := map[string]string{ // class name -> the kind its devices need, for the kind that does not fit
		classes[0].Name: v1beta1.GpuConfigKind, classes[1].Name: v1beta1.MigDeviceConfigKind}
	var fs []finding.Finding
	for j, req := range c.Requests {
		for _, class := range requestClasses(spec, req) {
			if need := wrong[class]; need != "" && need != kind {
				fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleInvalidConfig, Object: o.String(), Field: path.Child("requests").Index(j).String(),
					Message:    fmt.Sprintf("a %s for request %q, whose class %s allocates devices that need a %s: the driver refuses to prepare it", kind, req, class, need),
					Suggestion: fmt.Sprintf("use kind: %s for this request", need)})
			}
		}
	}
	return fs
}

// requestClasses are the device classes of a request ("r") or subrequest ("r/s") of spec.
func requestClasses(spec *resourceapi.ResourceClaimSpec, name string) []string {
	reqName, sub, hasSub := strings.Cut(name, "/")
	var out []string
	for _, r := range spec.Devices.Requests {
		if r.Name != reqName {
			continue
		}
		if r.Exactly != nil && !hasSub {
			out = append(out, r.Exactly.DeviceClassName)
		}
		for _, s := range r.FirstAvailable {
			if !hasSub || s.Name == sub {
				out = append(out, s.DeviceClassName)
			}
		}
	}
	return out
}

// request lints one exact request or subrequest: its class, its selectors, and what they select
// on the machine.
func (l *Linter) request(ctx context.Context, o manifest.Object, className string, sels []resourceapi.DeviceSelector, path *field.Path, classes map[string]*resourceapi.DeviceClass) []finding.Finding {
	var fs []finding.Finding
	class, ok := classes[className]
	if !ok {
		fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownClass, Object: o.String(), Field: path.Child("deviceClassName").String(),
			Message:    fmt.Sprintf("there is no DeviceClass %q: the claim cannot be allocated", className),
			Suggestion: "use one of " + strings.Join(text.Keys(classes), ", ")})
	}
	var exprs []string
	clean := true
	for i, s := range sels {
		if s.CEL == nil {
			continue
		}
		efs := append(l.expression(s.CEL.Expression), l.classAttributes(s.CEL.Expression, className)...)
		fs = append(fs, located(efs, o, path.Child("selectors").Index(i).Child("cel", "expression"))...)
		clean = clean && !finding.HasErrors(efs)
		exprs = append(exprs, s.CEL.Expression)
	}
	if l.devices == nil || !ok || !clean {
		return fs
	}
	var classExprs []string
	for _, s := range class.Spec.Selectors {
		if s.CEL != nil {
			classExprs = append(classExprs, s.CEL.Expression)
		}
	}
	return append(fs, located(l.evaluate(ctx, exprs, classExprs, "class "+class.Name), o, path.Child("selectors"))...)
}

// classAttributes finds attributes of the driver read in a request of one of the driver's
// classes whose devices never publish them: profile, parentUUID and parentIndex exist only on
// MIG devices, index and minor only on full GPUs. The scheduler gives up on the claim at the
// first device (no such key); the class is what is wrong. Reads under has() are guarded.
func (l *Linter) classAttributes(expr, className string) []finding.Finding {
	classes := selectors.DeviceClasses(l.driver)
	gpuClass, migClass := classes[0].Name, classes[1].Name
	var only map[string]bool
	var kind, other string
	switch className {
	case gpuClass:
		only, kind, other = map[string]bool{string(gpudra.AttrProfile): true, string(gpudra.AttrParentUUID): true, string(gpudra.AttrParentIndex): true}, "MIG devices", migClass
	case migClass:
		only, kind, other = map[string]bool{string(gpudra.AttrIndex): true, string(gpudra.AttrMinor): true}, "full GPUs", gpuClass
	default:
		return nil
	}
	p, ok := celexpr.Parse(celexpr.Env(l.compiler.CELFeatures()), expr)
	if !ok {
		return nil
	}
	var fs []finding.Finding
	for _, a := range p.Accesses() {
		if a.Kind != celexpr.AccessAttribute || a.Domain != l.driver || !only[a.Name] || guarded(a) {
			continue
		}
		line, col := p.Position(a.Expr)
		f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleWrongClass, Line: line, Column: col,
			Message:    fmt.Sprintf("`%s` exists only on %s: use %s (devices of class %s never publish it, so the scheduler gives up on the claim at the first one)", a.Name, kind, other, className),
			Suggestion: "set deviceClassName: " + other}
		if className == migClass {
			f.Suggestion += ", or use parentIndex to name the MIG device's GPU"
		}
		fs = append(fs, f)
	}
	return fs
}

// guarded reports whether an attribute read is a has() test.
func guarded(a celexpr.Access) bool {
	return a.Expr.Kind() == celast.SelectKind && a.Expr.AsSelect().IsTestOnly()
}

func (l *Linter) constraint(o manifest.Object, c resourceapi.DeviceConstraint, names sets.Set[string], path *field.Path) []finding.Finding {
	var fs []finding.Finding
	for j, r := range c.Requests {
		if !names.Has(r) {
			fs = append(fs, unknownRequest(o, path.Child("requests").Index(j), r, names))
		}
	}
	for _, m := range []struct {
		attr *resourceapi.FullyQualifiedName
		name string
	}{{c.MatchAttribute, "matchAttribute"}, {c.DistinctAttribute, "distinctAttribute"}} {
		if m.attr == nil {
			continue
		}
		if f, bad := l.constraintAttribute(string(*m.attr)); bad {
			f.Object, f.Field = o.String(), path.Child(m.name).String()
			fs = append(fs, f)
		}
	}
	return fs
}

// constraintAttribute checks the attribute of a matchAttribute or distinctAttribute constraint.
// A name without a domain is in the driver's domain, which is rarely what people mean for the
// standard topology attributes.
func (l *Linter) constraintAttribute(name string) (finding.Finding, bool) {
	domain, id := text.SplitQualified(name, l.driver)
	if _, ok := l.attrs[domain][id]; ok {
		return finding.Finding{}, false
	}
	f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownAttribute,
		Message: fmt.Sprintf("no device publishes attribute %s/%s: devices without it never satisfy the constraint", domain, id)}
	for _, d := range []string{stdDomain, l.driver} {
		if _, ok := l.attrs[d][id]; ok && d != domain {
			f.Suggestion = d + "/" + id
			if !strings.Contains(name, "/") {
				f.Rule = finding.RuleUnqualifiedName
				f.Message = fmt.Sprintf("%q has no domain, so it means %s/%s, which no device publishes", name, domain, id)
			} else {
				f.Rule = finding.RuleWrongDomain
			}
		}
	}
	return f, true
}

func unknownRequest(o manifest.Object, path *field.Path, name string, names sets.Set[string]) finding.Finding {
	return finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUnknownRequest, Object: o.String(), Field: path.String(),
		Message:    fmt.Sprintf("no request is named %q", name),
		Suggestion: "requests of this claim: " + strings.Join(sets.List(names), ", ")}
}

// opaque decodes the driver's opaque configuration strictly, as the driver will.
func (l *Linter) opaque(o manifest.Object, cfg *resourceapi.OpaqueDeviceConfiguration, path *field.Path) []finding.Finding {
	if cfg == nil || cfg.Driver != l.driver {
		return nil
	}
	if _, err := v1beta1.NewDecoder().DecodeRawAt(cfg.Parameters, path.Child("parameters")); err != nil {
		return []finding.Finding{{Severity: finding.SeverityError, Rule: finding.RuleInvalidConfig, Object: o.String(), Field: path.Child("parameters").String(),
			Message: err.Error(), Suggestion: "see the resource.nvidia.com/v1beta1 GpuConfig and MigDeviceConfig kinds"}}
	}
	return nil
}

// podReferences checks that the claims and templates a pod references are in the manifest (or,
// for templates, in Environment.Templates) and
// that containers use claims the pod declares.
func (l *Linter) podReferences(o manifest.Object, objs []manifest.Object) []finding.Finding {
	spec, _ := manifest.PodSpec(o.Object)
	if spec == nil {
		return nil
	}
	have := sets.New[string]()
	for _, x := range objs {
		switch x.Object.(type) {
		case *resourceapi.ResourceClaim, *resourceapi.ResourceClaimTemplate:
			have.Insert(x.Kind + "/" + x.Name)
		}
	}
	for _, name := range l.templates {
		have.Insert("ResourceClaimTemplate/" + name)
	}
	prefix := podSpecPath(o.Kind)
	var fs []finding.Finding
	declared := sets.New[string]()
	for i, rc := range spec.ResourceClaims {
		declared.Insert(rc.Name)
		p := prefix.Child("resourceClaims").Index(i)
		for _, ref := range []struct {
			name *string
			kind string
			path *field.Path
		}{{rc.ResourceClaimName, "ResourceClaim", p.Child("resourceClaimName")}, {rc.ResourceClaimTemplateName, "ResourceClaimTemplate", p.Child("resourceClaimTemplateName")}} {
			if ref.name != nil && !have.Has(ref.kind+"/"+*ref.name) {
				fs = append(fs, finding.Finding{Severity: finding.SeverityWarning, Rule: finding.RuleMissingReference, Object: o.String(), Field: ref.path.String(),
					Message:    fmt.Sprintf("%s %q is not in the manifest: it must exist in the namespace, or the pod stays Pending", ref.kind, *ref.name),
					Suggestion: closestRef(*ref.name, ref.kind, have)})
			}
		}
	}
	for _, c := range append(claimsOf(spec.InitContainers, "initContainers"), claimsOf(spec.Containers, "containers")...) {
		for j, name := range c.claims {
			if !declared.Has(name) {
				fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleMissingReference, Object: o.String(),
					Field:   prefix.Child(c.list).Index(c.index).Child("resources", "claims").Index(j).Child("name").String(),
					Message: fmt.Sprintf("container %s uses claim %q, which spec.resourceClaims does not declare: the API server rejects the pod", c.name, name)})
			}
		}
	}
	return fs
}

type containerClaims struct {
	list, name string
	index      int
	claims     []string
}

func claimsOf(cs []corev1.Container, list string) []containerClaims {
	var out []containerClaims
	for i, c := range cs {
		cc := containerClaims{list: list, name: c.Name, index: i}
		for _, r := range c.Resources.Claims {
			cc.claims = append(cc.claims, r.Name)
		}
		out = append(out, cc)
	}
	return out
}

func closestRef(name, kind string, have sets.Set[string]) string {
	other := map[string]string{"ResourceClaim": "ResourceClaimTemplate", "ResourceClaimTemplate": "ResourceClaim"}[kind]
	if have.Has(other + "/" + name) {
		field := map[string]string{"ResourceClaim": "resourceClaimName", "ResourceClaimTemplate": "resourceClaimTemplateName"}[other]
		return fmt.Sprintf("%q is a %s: reference it with %s", name, other, field)
	}
	var names []string
	for h := range have {
		if strings.HasPrefix(h, kind+"/") {
			names = append(names, strings.TrimPrefix(h, kind+"/"))
		}
	}
	if c := text.Closest(name, names); c != "" {
		return fmt.Sprintf("did you mean %s %q?", kind, c)
	}
	return ""
}

func podSpecPath(kind string) *field.Path {
	switch kind {
	case "Pod":
		return field.NewPath("spec")
	default:
		return field.NewPath("spec", "template", "spec")
	}
}

// located sets the object and, for findings without one, the field of expression findings.
func located(fs []finding.Finding, o manifest.Object, path *field.Path) []finding.Finding {
	for i := range fs {
		fs[i].Object = o.String()
		if fs[i].Field == "" {
			fs[i].Field = path.String()
		}
	}
	return fs
}

// evaluate runs selectors on the machine's devices that the class selectors (if any) select:
// a runtime error (the scheduler gives up on the claim for the node), a request that selects
// nothing, or request selectors that select everything the class does.
func (l *Linter) evaluate(ctx context.Context, exprs, classExprs []string, what string) []finding.Finding {
	candidates, fs := l.filter(ctx, l.devices, classExprs, what)
	if fs != nil {
		return fs
	}
	matched, fs := l.filter(ctx, candidates, exprs, "selector")
	if fs != nil {
		return fs
	}
	switch {
	case len(candidates) == 0 && classExprs != nil:
		return []finding.Finding{{Severity: finding.SeverityWarning, Rule: finding.RuleMatchesNothing,
			Message: fmt.Sprintf("%s selects no device on %s", what, l.machineName())}}
	case len(matched) == 0 && classExprs == nil:
		return []finding.Finding{{Severity: finding.SeverityWarning, Rule: finding.RuleMatchesNothing,
			Message: fmt.Sprintf("matches none of the %d devices of %s", len(candidates), l.machineName())}}
	case len(matched) == 0:
		return []finding.Finding{{Severity: finding.SeverityWarning, Rule: finding.RuleMatchesNothing,
			Message: fmt.Sprintf("the selectors match none of the %d devices %s selects on %s", len(candidates), what, l.machineName())}}
	case classExprs != nil && len(exprs) > 0 && len(matched) == len(candidates) && len(candidates) > 1:
		return []finding.Finding{{Severity: finding.SeverityInfo, Rule: finding.RuleMatchesEverything,
			Message: fmt.Sprintf("the selectors match all %d devices %s selects on %s: they filter nothing there", len(candidates), what, l.machineName())}}
	}
	return nil
}

// filter keeps the devices all expressions match; a runtime error becomes a finding.
func (l *Linter) filter(ctx context.Context, devices []*selectors.Device, exprs []string, what string) ([]*selectors.Device, []finding.Finding) {
	var out []*selectors.Device
	for _, d := range devices {
		ok := true
		for i, e := range exprs {
			sel, err := l.compiler.Compile(e)
			if err != nil {
				return nil, []finding.Finding{}
			}
			m, err := sel.Matches(ctx, d)
			if err != nil {
				return nil, []finding.Finding{{Severity: finding.SeverityError, Rule: finding.RuleRuntimeError,
					Message:    fmt.Sprintf("%s #%d fails on device %s of %s: %v; the scheduler then cannot allocate the claim on this node", what, i, d.Name(), l.machineName(), err),
					Suggestion: "guard optional attributes with has(...), or use a DeviceClass that selects only devices that publish them"}}
			}
			if !m {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}
