package selectors

import (
	"context"
	"sort"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// requestInfo is what one exact request or subrequest of a claim asks for.
type requestInfo struct {
	// name is the request name, "req/sub" for a subrequest.
	name string
	path *field.Path
	// class is the DeviceClass name; classObj is nil when the class is unknown.
	class    string
	classObj *resourceapi.DeviceClass
	count    int64
	all      bool
	// selectors are the class's selectors followed by the request's.
	selectors []string
	// types and profiles are the device types and MIG profiles the request can select: named
	// in its selectors (== or in), and published by the machine's devices it matches.
	types, profiles map[string]bool
	// matched is the number of machine devices the selectors match (-1 without a machine).
	matched int
}

// requests lists the exact requests and subrequests of a claim spec.
func requests(spec *resourceapi.ResourceClaimSpec, path *field.Path, classes map[string]*resourceapi.DeviceClass) []requestInfo {
	var out []requestInfo
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

func newRequestInfo(name string, path *field.Path, class string, mode resourceapi.DeviceAllocationMode, count int64, sels []resourceapi.DeviceSelector, classes map[string]*resourceapi.DeviceClass) requestInfo {
	ri := requestInfo{name: name, path: path, class: class, classObj: classes[class], count: count,
		all: mode == resourceapi.DeviceAllocationModeAll, types: map[string]bool{}, profiles: map[string]bool{}, matched: -1}
	if ri.count == 0 {
		ri.count = 1
	}
	if ri.classObj != nil {
		for _, s := range ri.classObj.Spec.Selectors {
			if s.CEL != nil {
				ri.selectors = append(ri.selectors, s.CEL.Expression)
			}
		}
	}
	for _, s := range sels {
		if s.CEL != nil {
			ri.selectors = append(ri.selectors, s.CEL.Expression)
		}
	}
	return ri
}

// analyze fills types and profiles from the selectors' literals and, with devices, from what
// they match.
func (ri *requestInfo) analyze(ctx context.Context, c *Compiler, driver string, devices []*Device) {
	env := c.validationEnv()
	for _, s := range ri.selectors {
		p, ok := parseExpression(env, s)
		if !ok {
			continue
		}
		for _, a := range p.accesses() {
			if a.kind != accessAttribute || a.domain != driver {
				continue
			}
			into := map[string]map[string]bool{string(gpudra.AttrType): ri.types, string(gpudra.AttrProfile): ri.profiles}[a.name]
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
		if !matchesAll(ctx, c, ri.selectors, d) {
			continue
		}
		ri.matched++
		if t, ok := d.Attribute(gpudra.AttrType); ok && t.StringValue != nil && d.Driver == driver {
			ri.types[*t.StringValue] = true
		}
		if p, ok := d.Attribute(gpudra.AttrProfile); ok && p.StringValue != nil && d.Driver == driver {
			ri.profiles[*p.StringValue] = true
		}
	}
}

// positiveLiterals are the strings an access is required to equal (== or in), outside any
// negation.
func positiveLiterals(a access) []string {
	cmp, ok := comparisonOf(a.expr)
	if !ok || (cmp.op != "==" && cmp.op != "in") || (cmp.op == "in" && !cmp.accessLeft) {
		return nil
	}
	for p, ok := cmp.call.Parent(); ok; p, ok = p.Parent() {
		if p.Kind() == celast.CallKind && p.AsCall().FunctionName() == "!_" {
			return nil
		}
	}
	return literalStrings(cmp.other)
}

// matchesAll reports whether every selector matches the device; errors count as no match.
func matchesAll(ctx context.Context, c *Compiler, exprs []string, d *Device) bool {
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

// isGPU reports whether the request can select full GPUs.
func (ri *requestInfo) isGPU() bool { return ri.types[gpudra.DeviceTypeGPU] }

// isMIG reports whether the request can select MIG devices.
func (ri *requestInfo) isMIG() bool { return ri.types[gpudra.DeviceTypeMIG] || len(ri.profiles) > 0 }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// strategy is the sharing strategy the driver will apply to a request's devices: the last
// opaque configuration of the driver that applies, DeviceClass configurations before the
// claim's, as the driver resolves them. ok is false when that configuration does not decode.
func strategy(spec *resourceapi.ResourceClaimSpec, ri requestInfo, driver string) (v1beta1.SharingStrategy, bool) {
	parent := strings.SplitN(ri.name, "/", 2)[0]
	var winner *resourceapi.OpaqueDeviceConfiguration
	if ri.classObj != nil {
		for _, c := range ri.classObj.Spec.Config {
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
			applies = applies || r == ri.name || r == parent
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
