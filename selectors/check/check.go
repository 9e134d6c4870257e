package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/internal/text"
	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/selectors/upgrade"
	"github.com/gpudra/gpudra/simulate"
)

// Checker checks manifests before they are applied: upgrade to resource.k8s.io/v1, lint,
// policy, then allocation of every claim on a target machine with the scheduler's allocator,
// and an explanation for every claim that does not fit. A Checker is for one manifest at a
// time; build one per manifest and machine (they are cheap; share the Compiler).
type Checker struct {
	env             lint.Environment
	features        *structured.Features
	policy          *lint.Policy
	linter          *lint.Linter
	upgrader        *upgrade.Upgrader
	objs            []manifest.Object
	apiVersions     []schema.GroupVersion
	workloadClasses map[string]*resourceapi.DeviceClass
}

// NewChecker returns a Checker. Without WithMachine it lints but does not allocate.
func NewChecker(opts ...CheckerOption) *Checker {
	c := &Checker{}
	for _, o := range opts {
		o(c)
	}
	if c.features == nil {
		f := DefaultFeatures()
		c.features = &f
	}
	if c.env.Compiler == nil {
		c.env.Compiler = selectors.NewCompiler(selectors.WithCELFeatures(CELFeatures(*c.features)))
	}
	c.env = c.env.WithDefaults()
	c.env.DeviceClasses = append(computeDomainClasses(), c.env.DeviceClasses...)
	c.linter, c.upgrader = lint.NewLinter(c.env), upgrade.NewUpgrader(c.env.DriverName)
	return c
}

// Report is what Check found in one manifest.
type Report struct {
	// Source names the manifest (a file name).
	Source string `json:"source"`
	// Machine is the target machine's name; empty when Check did not allocate.
	Machine string `json:"machine,omitempty"`
	// Upgraded is the manifest in resource.k8s.io/v1 when the upgrade changed it.
	Upgraded string `json:"upgraded,omitempty"`
	// Findings are upgrade hints, lint findings and problems reading the manifest.
	Findings []finding.Finding `json:"findings,omitempty"`
	// Violations are the policy's.
	Violations []lint.Violation `json:"violations,omitempty"`
	// Claims are the claims the workload's pods get, allocated on the machine in manifest
	// order, as the scheduler would see them one pod after the other.
	Claims []ClaimResult `json:"claims,omitempty"`
}

// OK reports whether the manifest passes: no error findings, no violations, and every claim
// allocated.
func (r *Report) OK() bool {
	if finding.HasErrors(r.Findings) || len(r.Violations) > 0 {
		return false
	}
	for _, c := range r.Claims {
		if !c.Allocated {
			return false
		}
	}
	return true
}

// ClaimResult is the simulated allocation of one claim.
type ClaimResult struct {
	// Claim is "namespace/name"; claims generated from a template are named
	// <template>-<n>.
	Claim string `json:"claim"`
	// Pods are the pods that use the claim.
	Pods []string `json:"pods,omitempty"`
	// Allocated says whether the claim fits.
	Allocated bool `json:"allocated"`
	// Node is the node the claim was allocated on.
	Node string `json:"node,omitempty"`
	// Devices are the allocated devices.
	Devices []AllocatedDevice `json:"devices,omitempty"`
	// Reasons say why the claim does not fit.
	Reasons []string `json:"reasons,omitempty"`
}

// AllocatedDevice is one device of an allocation result.
type AllocatedDevice struct {
	// Request is the request (or "request/subrequest") the device was allocated for.
	Request string `json:"request"`
	// Driver is the DRA driver of the device.
	Driver string `json:"driver"`
	// Pool is the resource pool of the device (the node name, for the gpudra driver).
	Pool string `json:"pool"`
	// Device is the device name in its pool ("gpu-0", "gpu-0-mig-1g.5gb-0").
	Device string `json:"device"`
	// Shared is set for a share of a device that allows multiple allocations.
	Shared bool `json:"shared,omitempty"`
}

// Check checks one manifest. The error is for input that cannot be read at all (not YAML);
// everything else is in the report.
func (c *Checker) Check(ctx context.Context, source string, data []byte) (*Report, error) {
	logger := klog.FromContext(ctx).WithValues("source", source)
	r := &Report{Source: source}
	// What the API server would refuse is judged on the manifest as written, before upgrades.
	original, derr := manifest.Decode(data)
	kindless := kindlessFindings(data)
	r.Findings = append(r.Findings, kindless...)
	r.Findings = append(r.Findings, c.apiServerFindings(original, derr == nil && len(kindless) == 0)...)
	domains, cdFindings := readComputeDomains(data, c.env.Namespace)
	r.Findings = append(r.Findings, cdFindings...)
	up, err := c.upgrader.Upgrade(data)
	if up == nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	r.Findings = append(r.Findings, upgradeFindings(up, err)...)
	if up.Changed() {
		r.Upgraded = string(up.Manifest)
	}
	objs, err := manifest.Decode(up.Manifest)
	for _, e := range unwrapAll(err) {
		f := finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleDecode, Message: e.Error()}
		var de *manifest.DecodeError
		if errors.As(e, &de) {
			f.Object, f.Message = de.Object, de.Err.Error()
		}
		r.Findings = append(r.Findings, f)
	}
	c.objs = objs
	// The controller makes the domains' channel templates; the pods may name them.
	clique := machineClique(c.env.Slices)
	templates := channelTemplates(domains, objs, clique)
	linter := c.linter
	if len(templates) > 0 {
		env := c.env
		env.Templates = templates
		linter = lint.NewLinter(env)
	}
	r.Findings = append(r.Findings, linter.Objects(ctx, objs)...)
	if c.policy != nil {
		r.Violations = c.policy.Evaluate(ctx, objs, c.env)
	}
	if c.env.Slices == nil {
		return r, nil
	}
	r.Machine = c.env.Machine
	w, err := simulate.LoadWorkload(up.Manifest, nil, simulate.SkipOtherKinds(), simulate.InNamespace(c.env.Namespace),
		simulate.WithTemplates(templates...))
	if err != nil {
		r.Findings = append(r.Findings, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleDecode, Message: "cannot simulate the workload: " + err.Error()})
		return r, nil
	}
	r.Claims = c.allocate(ctx, w)
	domainReasons(domains, w.Claims, r.Claims, clique, nodeCount(c.env.Slices))
	logger.V(2).Info("Checked manifest", "findings", len(r.Findings), "violations", len(r.Violations), "claims", len(r.Claims))
	return r, nil
}

// upgradeFindings turns upgrade changes and errors into findings.
func upgradeFindings(up *upgrade.Upgrade, err error) []finding.Finding {
	var fs []finding.Finding
	for _, ch := range up.Changes {
		f := finding.Finding{Severity: ch.Severity, Rule: finding.RuleUpgrade, Object: ch.Object, Field: ch.Field, Message: ch.Message}
		if ch.Rule != "" {
			f.Rule = ch.Rule
		}
		if ch.Severity != finding.SeverityInfo {
			f.Suggestion = "apply the upgraded manifest"
		}
		fs = append(fs, f)
	}
	for _, e := range unwrapAll(err) {
		var ue *upgrade.UpgradeError
		if errors.As(e, &ue) {
			fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUpgrade, Object: ue.Object, Field: ue.Field, Message: ue.Reason})
		} else {
			fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleUpgrade, Message: e.Error()})
		}
	}
	return fs
}

func unwrapAll(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// allocate allocates the workload's claims pod by pod: all claims of a pod on one node, shared
// claims once. Claims no pod uses are allocated on their own.
func (c *Checker) allocate(ctx context.Context, w *simulate.Workload) []ClaimResult {
	c.workloadClasses = map[string]*resourceapi.DeviceClass{}
	for _, cl := range w.Classes {
		c.workloadClasses[cl.Name] = cl
	}
	nodes := c.nodes(w.Classes)
	results := make([]ClaimResult, len(w.Claims))
	done := make([]bool, len(w.Claims))
	for i, cl := range w.Claims {
		results[i].Claim = cl.Namespace + "/" + cl.Name
	}
	var units [][]int
	for _, p := range w.Pods {
		for _, i := range p.Claims {
			results[i].Pods = append(results[i].Pods, p.Name)
		}
		units = append(units, p.Claims)
	}
	for i := range w.Claims {
		if len(results[i].Pods) == 0 {
			units = append(units, []int{i})
		}
	}
	for _, u := range units {
		c.allocateUnit(ctx, nodes, w.Claims, u, results, done)
	}
	return results
}

// allocateUnit places the claims of one pod on the first node where all of them fit; done
// marks the claims allocated so far.
func (c *Checker) allocateUnit(ctx context.Context, nodes []*node, claims []*resourceapi.ResourceClaim, unit []int, results []ClaimResult, done []bool) {
	candidates := nodes
	for _, i := range unit {
		if done[i] && results[i].Allocated {
			candidates = nodeNamed(nodes, results[i].Node) // a shared claim fixes the pod's node
		}
	}
	var failures []unitFailure
	var failedOn []*node
	for _, n := range candidates {
		var placed []*resourceapi.ResourceClaim
		var placedIdx []int
		var fail *unitFailure
		for _, i := range unit {
			if done[i] {
				continue
			}
			got, err := n.sim.Allocate(ctx, claims[i])
			if err != nil {
				fail = &unitFailure{i, err}
				break
			}
			n.record(got, true)
			placed, placedIdx = append(placed, got), append(placedIdx, i)
		}
		if fail == nil {
			for j, got := range placed {
				i := placedIdx[j]
				done[i] = true
				results[i].Allocated, results[i].Node, results[i].Devices, results[i].Reasons = true, n.name, devicesOf(got), nil
			}
			return
		}
		for _, got := range placed {
			n.record(got, false)
			n.sim.Release(got)
		}
		failures, failedOn = append(failures, *fail), append(failedOn, n)
	}
	c.explainUnit(ctx, claims, unit, results, done, failures, failedOn)
}

// unitFailure is the claim of a pod that did not fit on a node, and the allocator's answer.
type unitFailure struct {
	claim int
	err   error
}

// explainUnit records why a pod's claims do not fit, on every node that was tried.
func (c *Checker) explainUnit(ctx context.Context, claims []*resourceapi.ResourceClaim, unit []int, results []ClaimResult, done []bool, failures []unitFailure, failedOn []*node) {
	blamed := map[int]bool{}
	for k, f := range failures {
		var allocErr error
		if !errors.Is(f.err, simulate.ErrUnschedulable) {
			allocErr = f.err
		}
		reasons := c.explain(ctx, failedOn[k], claims[f.claim], allocErr)
		if len(failedOn) > 1 {
			for j := range reasons {
				reasons[j] = "node " + failedOn[k].name + ": " + reasons[j]
			}
		}
		for _, r := range reasons { // a shared claim is tried once per pod that uses it
			if !slices.Contains(results[f.claim].Reasons, r) {
				results[f.claim].Reasons = append(results[f.claim].Reasons, r)
			}
		}
		blamed[f.claim] = true
	}
	if len(failures) == 0 {
		for _, i := range unit {
			if !done[i] {
				results[i].Reasons = append(results[i].Reasons, "a claim this pod shares is allocated on a node this pod cannot use")
			}
		}
	}
	// Claims stay open for the next pod that uses them (a shared claim may fit with it).
	for _, i := range unit {
		if !done[i] && !blamed[i] && len(results[i].Reasons) == 0 {
			results[i].Reasons = []string{"not allocated: another claim of the same pod does not fit"}
		}
	}
}

func nodeNamed(nodes []*node, name string) []*node {
	for _, n := range nodes {
		if n.name == name {
			return []*node{n}
		}
	}
	return nil
}

func devicesOf(claim *resourceapi.ResourceClaim) []AllocatedDevice {
	var out []AllocatedDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		out = append(out, AllocatedDevice{Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device, Shared: r.ShareID != nil})
	}
	return out
}

// nodes groups the machine's slices by node: slices of one node go to that node, slices for
// all nodes or a node selector to every node. A machine whose slices name no node is one node
// named after the machine.
func (c *Checker) nodes(workloadClasses []*resourceapi.DeviceClass) []*node {
	byNode := map[string][]*resourceapi.ResourceSlice{}
	var common []*resourceapi.ResourceSlice
	for _, s := range c.env.Slices {
		if s == nil {
			continue
		}
		if s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
			byNode[*s.Spec.NodeName] = append(byNode[*s.Spec.NodeName], s)
		} else {
			common = append(common, s)
		}
	}
	names := text.Keys(byNode)
	if len(names) == 0 {
		names = []string{c.env.Machine}
	}
	classes := append(append(selectors.DeviceClasses(c.env.DriverName), c.env.DeviceClasses...), workloadClasses...)
	var out []*node
	for _, name := range names {
		slices := append(append([]*resourceapi.ResourceSlice{}, byNode[name]...), common...)
		sim := simulate.New(name, classes, slices, simulate.WithFeatures(*c.features))
		out = append(out, newNode(name, sim, slices))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
