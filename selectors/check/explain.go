package check

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/celexpr"
	"github.com/gpudra/gpudra/selectors/internal/request"
	"github.com/gpudra/gpudra/selectors/internal/text"
	"github.com/gpudra/gpudra/simulate"
)

// node is what the explanation knows about one node: its devices, counter sets, and what the
// claims allocated so far hold.
type node struct {
	name    string
	sim     *simulate.Simulator
	devices []*selectors.Device
	// counters is the capacity of each counter set, by "driver/pool/set".
	counters map[string]map[string]resource.Quantity
	// holder is the claim holding each exclusively allocated device, by device ID.
	holder map[string]string
	// consumed is what allocated devices consume of each counter set.
	consumed map[string]map[string]resource.Quantity
}

func newNode(name string, sim *simulate.Simulator, slices []*resourceapi.ResourceSlice) *node {
	n := &node{name: name, sim: sim, devices: selectors.DevicesFromSlices(slices), counters: map[string]map[string]resource.Quantity{},
		holder: map[string]string{}, consumed: map[string]map[string]resource.Quantity{}}
	for _, s := range slices {
		for _, cs := range s.Spec.SharedCounters {
			key := s.Spec.Driver + "/" + s.Spec.Pool.Name + "/" + cs.Name
			n.counters[key] = map[string]resource.Quantity{}
			for c, v := range cs.Counters {
				n.counters[key][c] = v.Value
			}
		}
	}
	return n
}

// record notes what an allocated claim holds (add) or gives back.
func (n *node) record(claim *resourceapi.ResourceClaim, add bool) {
	if claim.Status.Allocation == nil {
		return
	}
	byID := n.deviceIndex()
	for _, r := range claim.Status.Allocation.Devices.Results {
		id := r.Driver + "/" + r.Pool + "/" + r.Device
		if r.ShareID == nil {
			if add {
				n.holder[id] = claim.Namespace + "/" + claim.Name
			} else {
				delete(n.holder, id)
			}
		}
		d := byID[id]
		if d == nil {
			continue
		}
		for _, cc := range d.Device.ConsumesCounters {
			key := d.Driver + "/" + d.Pool + "/" + cc.CounterSet
			if n.consumed[key] == nil {
				n.consumed[key] = map[string]resource.Quantity{}
			}
			for c, v := range cc.Counters {
				q := n.consumed[key][c]
				if add {
					q.Add(v.Value)
				} else {
					q.Sub(v.Value)
				}
				n.consumed[key][c] = q
			}
		}
	}
}

func (n *node) deviceIndex() map[string]*selectors.Device {
	out := make(map[string]*selectors.Device, len(n.devices))
	for _, d := range n.devices {
		out[d.ID()] = d
	}
	return out
}

// explain says why a claim does not fit on a node: per request, which selector or which
// allocation rejected which devices; then constraints; then which request no longer fits once
// the ones before it are placed, as the allocator itself decides.
func (c *Checker) explain(ctx context.Context, n *node, claim *resourceapi.ResourceClaim, allocErr error) []string {
	var reasons []string
	if allocErr != nil {
		msg, _, _ := strings.Cut(allocErr.Error(), "\n") // CEL errors add the source and a caret below
		reasons = append(reasons, "the scheduler gives up on this claim: "+msg)
	}
	classes := request.KnownClasses(c.env.DriverName, c.env.DeviceClasses, c.objs)
	for name, cl := range c.workloadClasses {
		classes[name] = cl
	}
	reqs := request.Of(&claim.Spec, field.NewPath("spec"), classes)
	enough := true
	for _, ri := range reqs {
		line, ok := c.explainRequest(ctx, n, ri, nil)
		reasons = append(reasons, line)
		enough = enough && ok
	}
	if !enough || allocErr != nil {
		return reasons
	}
	if r := c.explainConstraints(ctx, n, claim, reqs); r != "" {
		return append(reasons, r)
	}
	if r := c.explainPrefix(ctx, n, claim, reqs); r != "" {
		return append(reasons, r)
	}
	return append(reasons, "each request has enough devices on its own, but the allocator finds no combination that satisfies all requests and constraints together")
}

// verdict is why one device cannot serve a request.
type verdict struct {
	key     string // groups devices with the same reason
	message string
	// attrs are the attributes a rejecting selector reads, to show their values.
	attrs []string
}

// explainRequest classifies every device of the node for one request; ok reports whether at
// least count devices are usable. pin restricts devices to attribute values (a constraint).
func (c *Checker) explainRequest(ctx context.Context, n *node, ri request.Info, pin map[string]string) (string, bool) {
	head := fmt.Sprintf("request %q (%s)", ri.Name, ri.Describe())
	if ri.ClassObj == nil {
		return fmt.Sprintf("%s: DeviceClass %q does not exist", head, ri.Class), false
	}
	groups := map[string][]*selectors.Device{}
	verdicts := map[string]verdict{}
	var order []string
	usable := 0
	var usableNames []string
	for _, d := range n.devices {
		v, ok := c.judge(ctx, n, ri, d, pin)
		if ok {
			usable++
			usableNames = append(usableNames, d.Name())
			continue
		}
		if _, seen := groups[v.key]; !seen {
			order = append(order, v.key)
			verdicts[v.key] = v
		}
		groups[v.key] = append(groups[v.key], d)
	}
	need := int(ri.Count)
	if ri.All {
		need = max(usable, 1)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d of %d devices usable", head, usable, len(n.devices))
	if usable > 0 {
		fmt.Fprintf(&sb, " (%s)", text.List(usableNames, 4))
	}
	for _, k := range order {
		ds := groups[k]
		fmt.Fprintf(&sb, "; %d %s", len(ds), verdicts[k].message)
		if vals := attributeValues(ds, verdicts[k].attrs); vals != "" {
			fmt.Fprintf(&sb, " (they have %s)", vals)
		}
	}
	return sb.String(), usable >= need
}

// judge decides whether a device can serve a request on the node, and if not, why.
func (c *Checker) judge(ctx context.Context, n *node, ri request.Info, d *selectors.Device, pin map[string]string) (verdict, bool) {
	nClass := 0
	if ri.ClassObj != nil {
		for _, s := range ri.ClassObj.Spec.Selectors {
			if s.CEL != nil {
				nClass++
			}
		}
	}
	for i, expr := range ri.Selectors {
		which := fmt.Sprintf("class %s selector #%d", ri.Class, i)
		if i >= nClass {
			which = fmt.Sprintf("request selector #%d", i-nClass)
		}
		sel, err := c.env.Compiler.Compile(expr)
		if err != nil {
			return verdict{key: which + " error", message: fmt.Sprintf("not evaluated: %s does not compile", which)}, false
		}
		ok, err := sel.Matches(ctx, d)
		if err != nil {
			return verdict{key: which + " error " + err.Error(), message: fmt.Sprintf("fail %s: %v", which, err)}, false
		}
		if !ok {
			return verdict{key: which, message: fmt.Sprintf("rejected by %s `%s`", which, text.Abbreviate(expr, 90)), attrs: c.readAttributes(expr)}, false
		}
	}
	if h, ok := n.holder[d.ID()]; ok {
		return verdict{key: "held " + h, message: "allocated to claim " + h}, false
	}
	if t := untolerated(d); t != "" {
		return verdict{key: "taint " + t, message: "tainted " + t}, false
	}
	for attr, want := range pin {
		if got := attrString(d, attr); got != want {
			return verdict{key: "pin " + attr, message: fmt.Sprintf("excluded by the constraint on %s (want %s)", attr, want)}, false
		}
	}
	if set, _ := n.exhausted(d); set != "" {
		return verdict{key: "counters " + set, message: fmt.Sprintf("need counters of %s that allocated devices already use", set)}, false
	}
	return verdict{}, true
}

// exhausted returns the first counter set and counter the device would overdraw.
func (n *node) exhausted(d *selectors.Device) (string, string) {
	for _, cc := range d.Device.ConsumesCounters {
		key := d.Driver + "/" + d.Pool + "/" + cc.CounterSet
		for _, c := range sortedCounterNames(cc.Counters) {
			capacity, ok := n.counters[key][c]
			if !ok {
				return cc.CounterSet, c + " is not in the counter set"
			}
			used := n.consumed[key][c]
			used.Add(cc.Counters[c].Value)
			if used.Cmp(capacity) > 0 {
				return cc.CounterSet, c
			}
		}
	}
	return "", ""
}

func sortedCounterNames(m map[string]resourceapi.Counter) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// untolerated returns a NoSchedule or NoExecute taint of the device ("key=value:effect").
// Requests cannot tolerate taints in the manifests check handles without saying so; the
// allocator has the final word.
func untolerated(d *selectors.Device) string {
	for _, t := range d.Device.Taints {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
		}
	}
	return ""
}

// readAttributes are the qualified attribute names a selector reads.
func (c *Checker) readAttributes(expr string) []string {
	p, ok := celexpr.Parse(celexpr.Env(c.env.Compiler.CELFeatures()), expr)
	if !ok {
		return nil
	}
	var out []string
	for _, a := range p.Accesses() {
		if a.Kind == celexpr.AccessAttribute && a.Name != "" {
			out = append(out, a.Domain+"/"+a.Name)
		}
	}
	return text.Uniq(out)
}

// attributeValues tabulates the values of attributes among devices: "profile 1g.5gb ×16,
// 2g.10gb ×8".
func attributeValues(ds []*selectors.Device, attrs []string) string {
	var parts []string
	for _, a := range attrs {
		count := map[string]int{}
		for _, d := range ds {
			v := attrString(d, a)
			if v == "" {
				v = "(none)"
			}
			count[v]++
		}
		vals := text.Keys(count)
		if len(vals) > 5 {
			vals = append(vals[:5], "...")
		}
		var vs []string
		for _, v := range vals {
			if v == "..." {
				vs = append(vs, v)
				continue
			}
			vs = append(vs, fmt.Sprintf("%s ×%d", v, count[v]))
		}
		_, name := text.SplitQualified(a, "")
		parts = append(parts, name+" "+strings.Join(vs, ", "))
	}
	return strings.Join(parts, "; ")
}

// attrString is an attribute's value as text ("" when absent), by "domain/name".
func attrString(d *selectors.Device, qualified string) string {
	a, ok := d.Attribute(resourceapi.QualifiedName(qualified))
	if !ok {
		return ""
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return fmt.Sprint(a)
}

// explainConstraints finds a matchAttribute constraint that no attribute value can satisfy:
// for every value, some request of the constraint has too few usable devices with it.
func (c *Checker) explainConstraints(ctx context.Context, n *node, claim *resourceapi.ResourceClaim, reqs []request.Info) string {
	for i, con := range claim.Spec.Devices.Constraints {
		if con.MatchAttribute == nil {
			continue
		}
		attr := string(*con.MatchAttribute)
		counts := map[string]map[string]int{} // value → request → usable devices
		var involved []request.Info
		for _, ri := range reqs {
			if !constrains(con, ri.Name) {
				continue
			}
			involved = append(involved, ri)
			for _, d := range n.devices {
				if _, ok := c.judge(ctx, n, ri, d, nil); !ok {
					continue
				}
				v := attrString(d, attr)
				if counts[v] == nil {
					counts[v] = map[string]int{}
				}
				counts[v][ri.Name]++
			}
		}
		fits := false
		for v, per := range counts {
			ok := v != ""
			for _, ri := range involved {
				ok = ok && (ri.All || per[ri.Name] >= int(ri.Count))
			}
			fits = fits || ok
		}
		if !fits {
			var vals []string
			for _, v := range text.Keys(counts) {
				var per []string
				for _, ri := range involved {
					per = append(per, fmt.Sprintf("%s %d/%d", ri.Name, counts[v][ri.Name], ri.Count))
				}
				label := v
				if label == "" {
					label = "(attribute missing)"
				}
				vals = append(vals, label+": "+strings.Join(per, ", "))
			}
			return fmt.Sprintf("constraint #%d (matchAttribute %s): no single value has enough usable devices for every request [%s]", i, attr, text.List(vals, 6))
		}
	}
	return ""
}

func constrains(con resourceapi.DeviceConstraint, request string) bool {
	if len(con.Requests) == 0 {
		return true
	}
	parent := strings.SplitN(request, "/", 2)[0]
	for _, r := range con.Requests {
		if r == request || r == parent {
			return true
		}
	}
	return false
}

// explainPrefix asks the allocator for the claim's first k requests, k = 1, 2, ...: the first
// request that no longer fits once those before it are placed is explained against what the
// placed ones hold.
func (c *Checker) explainPrefix(ctx context.Context, n *node, claim *resourceapi.ResourceClaim, reqs []request.Info) string {
	all := claim.Spec.Devices.Requests
	for k := 1; k < len(all); k++ {
		if k+1 < len(all) {
			if got, err := allocatePrefix(ctx, n, claim, k+1); err == nil {
				n.sim.Release(got)
				continue
			}
		}
		got, err := allocatePrefix(ctx, n, claim, k)
		if err != nil {
			return fmt.Sprintf("requests %s do not fit together", requestNames(all[:k]))
		}
		n.record(got, true)
		pin := pinsFor(claim.Spec.Devices.Constraints, got, all[k].Name, n)
		var lines []string
		for _, ri := range reqs {
			if strings.SplitN(ri.Name, "/", 2)[0] == all[k].Name {
				line, _ := c.explainRequest(ctx, n, ri, pin)
				lines = append(lines, line)
			}
		}
		n.record(got, false)
		n.sim.Release(got)
		var placed []string
		for _, r := range got.Status.Allocation.Devices.Results {
			placed = append(placed, r.Request+"="+r.Device)
		}
		return fmt.Sprintf("requests %s fit together (the allocator picks %s), but then request %q does not: %s",
			requestNames(all[:k]), text.List(placed, 6), all[k].Name, strings.Join(lines, "; "))
	}
	return ""
}

// allocatePrefix allocates a copy of the claim with only its first k requests (and the
// constraints among them); the caller releases it.
func allocatePrefix(ctx context.Context, n *node, claim *resourceapi.ResourceClaim, k int) (*resourceapi.ResourceClaim, error) {
	all := claim.Spec.Devices.Requests
	partial := claim.DeepCopy()
	partial.Name += "-first-requests"
	partial.UID += "-partial"
	partial.Spec.Devices.Requests = all[:k]
	partial.Spec.Devices.Config = nil
	partial.Spec.Devices.Constraints = constraintsWithin(claim.Spec.Devices.Constraints, all[:k])
	return n.sim.Allocate(ctx, partial)
}

// constraintsWithin keeps the constraints that only name the given requests (constraints
// without requests apply to all).
func constraintsWithin(cons []resourceapi.DeviceConstraint, reqs []resourceapi.DeviceRequest) []resourceapi.DeviceConstraint {
	names := map[string]bool{}
	for _, r := range reqs {
		names[r.Name] = true
	}
	var out []resourceapi.DeviceConstraint
	for _, con := range cons {
		ok := true
		for _, r := range con.Requests {
			ok = ok && names[strings.SplitN(r, "/", 2)[0]]
		}
		if ok {
			out = append(out, con)
		}
	}
	return out
}

// pinsFor returns, for the constraints that cover request next, the attribute values the
// already placed devices fix.
func pinsFor(cons []resourceapi.DeviceConstraint, placed *resourceapi.ResourceClaim, next string, n *node) map[string]string {
	byID := n.deviceIndex()
	pin := map[string]string{}
	for _, con := range cons {
		if con.MatchAttribute == nil || !constrains(con, next) {
			continue
		}
		for _, r := range placed.Status.Allocation.Devices.Results {
			if !constrains(con, r.Request) {
				continue
			}
			if d := byID[r.Driver+"/"+r.Pool+"/"+r.Device]; d != nil {
				pin[string(*con.MatchAttribute)] = attrString(d, string(*con.MatchAttribute))
			}
		}
	}
	return pin
}

func requestNames(reqs []resourceapi.DeviceRequest) string {
	var names []string
	for _, r := range reqs {
		names = append(names, fmt.Sprintf("%q", r.Name))
	}
	return strings.Join(names, ", ")
}
