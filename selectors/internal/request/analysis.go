package request

import (
	"context"
	"fmt"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/celexpr"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// Info is what one exact request or subrequest of a claim asks for.
type Info struct {
	// Name is the request name, "req/sub" for a subrequest.
	Name string
	// path is the field path of the request (exactly, or firstAvailable[j]).
	path *field.Path
	// Class is the DeviceClass name.
	Class string
	// ClassObj is the DeviceClass; nil when the class is unknown.
	ClassObj *resourceapi.DeviceClass
	// Count is the number of devices asked for (1 when unset); see All.
	Count int64
	// All is set for allocationMode All.
	All bool
	// Selectors are the class's selectors followed by the request's.
	Selectors []string
	// Profiles are the MIG profiles the request can select: named in its selectors (== or in),
	// and published by the machine's devices it matches (after Analyze).
	Profiles map[string]bool
	// types are the device types the request can select, found as Profiles are.
	types map[string]bool
	// matched is the number of machine devices the selectors match (-1 without a machine).
	matched int
}

// Of lists the exact requests and subrequests of a claim spec.
func Of(spec *resourceapi.ResourceClaimSpec, path *field.Path, classes map[string]*resourceapi.DeviceClass) []Info {
	var out []Info
	for i, r := range spec.Devices.Requests {
		p := path.Child("devices", "requests").Index(i)
		if r.Exactly != nil {
			out = append(out, newRequestInfo(r.Name, p.Child("exactly"), r.Exactly.DeviceClassName, r.Exactly.AllocationMode, r.Exactly.Count, r.Exactly.Selectors, classes))
		}
		for j, s := range r.FirstAvailable {
			out = append(out, newRequestInfo(r.Name+"/"+s.Name, p.Child("firstAvailable").Index(j), s.DeviceClassName, s.AllocationMode, s.Count, s.Selectors, classes))
		}
	}
	return out
}

func newRequestInfo(name string, path *field.Path, class string, mode resourceapi.DeviceAllocationMode, count int64, sels []resourceapi.DeviceSelector, classes map[string]*resourceapi.DeviceClass) Info {
	ri := Info{Name: name, path: path, Class: class, ClassObj: classes[class], Count: count,
		All: mode == resourceapi.DeviceAllocationModeAll, types: map[string]bool{}, Profiles: map[string]bool{}, matched: -1}
	if ri.Count == 0 {
		ri.Count = 1
	}
	if ri.ClassObj != nil {
		for _, s := range ri.ClassObj.Spec.Selectors {
			if s.CEL != nil {
				ri.Selectors = append(ri.Selectors, s.CEL.Expression)
			}
		}
	}
	for _, s := range sels {
		if s.CEL != nil {
			ri.Selectors = append(ri.Selectors, s.CEL.Expression)
		}
	}
	return ri
}

// Analyze fills types and profiles from the selectors' literals and, with devices, from what
// they match.
func (ri *Info) Analyze(ctx context.Context, c *selectors.Compiler, driver string, devices []*selectors.Device) {
	env := celexpr.Env(c.CELFeatures())
	for _, s := range ri.Selectors {
		p, ok := celexpr.Parse(env, s)
		if !ok {
			continue
		}
		for _, a := range p.Accesses() {
			if a.Kind != celexpr.AccessAttribute || a.Domain != driver {
				continue
			}
			into := map[string]map[string]bool{string(gpudra.AttrType): ri.types, string(gpudra.AttrProfile): ri.Profiles}[a.Name]
			if into == nil {
				continue
			}
			for _, v := range positiveLiterals(a) {
				into[v] = true
			}
		}
	}
	if devices == nil {
		return
	}
	ri.matched = 0
	for _, d := range devices {
		if !matchesAll(ctx, c, ri.Selectors, d) {
			continue
		}
		ri.matched++
		if t, ok := d.Attribute(gpudra.AttrType); ok && t.StringValue != nil && d.Driver == driver {
			ri.types[*t.StringValue] = true
		}
		if p, ok := d.Attribute(gpudra.AttrProfile); ok && p.StringValue != nil && d.Driver == driver {
			ri.Profiles[*p.StringValue] = true
		}
	}
}

// positiveLiterals are the strings an access is required to equal (== or in), outside any
// negation.
func positiveLiterals(a celexpr.Access) []string {
	cmp, ok := celexpr.ComparisonOf(a.Expr)
	if !ok || (cmp.Op != "==" && cmp.Op != "in") || (cmp.Op == "in" && !cmp.AccessLeft) {
		return nil
	}
	for p, ok := cmp.Call.Parent(); ok; p, ok = p.Parent() {
		if p.Kind() == celast.CallKind && p.AsCall().FunctionName() == "!_" {
			return nil
		}
	}
	return celexpr.LiteralStrings(cmp.Other)
}

// matchesAll reports whether every selector matches the device; errors count as no match.
func matchesAll(ctx context.Context, c *selectors.Compiler, exprs []string, d *selectors.Device) bool {
	for _, e := range exprs {
		sel, err := c.Compile(e)
		if err != nil {
			return false
		}
		if ok, err := sel.Matches(ctx, d); err != nil || !ok {
			return false
		}
	}
	return true
}

// IsGPU reports whether the request can select full GPUs.
func (ri *Info) IsGPU() bool { return ri.types[gpudra.DeviceTypeGPU] }

// IsMIG reports whether the request can select MIG devices.
func (ri *Info) IsMIG() bool { return ri.types[gpudra.DeviceTypeMIG] || len(ri.Profiles) > 0 }

// Strategy is the sharing strategy the driver will apply to a request's devices: the last
// opaque configuration of the driver that applies, DeviceClass configurations before the
// claim's, as the driver resolves them. ok is false when that configuration does not decode.
func Strategy(spec *resourceapi.ResourceClaimSpec, ri Info, driver string) (v1beta1.SharingStrategy, bool) {
	parent := strings.SplitN(ri.Name, "/", 2)[0]
	var winner *resourceapi.OpaqueDeviceConfiguration
	if ri.ClassObj != nil {
		for _, c := range ri.ClassObj.Spec.Config {
			if c.Opaque != nil && c.Opaque.Driver == driver {
				winner = c.Opaque
			}
		}
	}
	for _, c := range spec.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != driver {
			continue
		}
		applies := len(c.Requests) == 0
		for _, r := range c.Requests {
			applies = applies || r == ri.Name || r == parent
		}
		if applies {
			winner = c.Opaque
		}
	}
	if winner == nil {
		return v1beta1.StrategyExclusive, true
	}
	cfg, err := v1beta1.NewDecoder().DecodeRaw(winner.Parameters)
	if err != nil {
		return "", false
	}
	return cfg.Strategy(), true
}

// Describe says how many devices of which class the request asks for ("2 of class
// gpu.nvidia.com").
func (ri Info) Describe() string {
	n := fmt.Sprintf("%d", ri.Count)
	if ri.All {
		n = "all"
	}
	return fmt.Sprintf("%s of class %s", n, ri.Class)
}

// KnownClasses are the driver's DeviceClasses, the extra ones (given as options) and those of
// the manifest.
func KnownClasses(driver string, extra []*resourceapi.DeviceClass, objs []manifest.Object) map[string]*resourceapi.DeviceClass {
	classes := map[string]*resourceapi.DeviceClass{}
	for _, c := range append(selectors.DeviceClasses(driver), extra...) {
		if c != nil {
			classes[c.Name] = c
		}
	}
	for _, o := range objs {
		if c, ok := o.Object.(*resourceapi.DeviceClass); ok {
			classes[c.Name] = c
		}
	}
	return classes
}
