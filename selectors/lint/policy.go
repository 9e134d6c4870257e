package lint

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra/internal/input"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/request"
	"github.com/gpudra/gpudra/selectors/internal/text"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// Policy is what a platform team allows GPU claims to ask for. The zero Policy allows
// everything.
//
// In YAML (ParsePolicy):
//
//	blockedMIGProfiles: ["4g.20gb", "7g.*"]   # seed 001's CrossGuard policy, 7g patterns included
//	allowedMIGProfiles: ["1g.5gb", "2g.10gb", "3g.20gb"]
//	maxGPUsPerClaim: 2
//	requiredSharing:
//	  inference: TimeSlicing                   # every request in namespace inference
//	  "*": Exclusive                           # every other namespace
type Policy struct {
	// AllowedMIGProfiles, when not empty, are the only MIG profiles a request may select.
	// Entries are profile names or path.Match patterns ("1g.*").
	AllowedMIGProfiles []string `json:"allowedMIGProfiles,omitempty"`
	// BlockedMIGProfiles are MIG profiles no request may select (names or patterns).
	BlockedMIGProfiles []string `json:"blockedMIGProfiles,omitempty"`
	// MaxGPUsPerClaim, when positive, is the most full GPUs one claim may allocate.
	MaxGPUsPerClaim int `json:"maxGPUsPerClaim,omitempty"`
	// RequiredSharing maps a namespace to the sharing strategy (Exclusive, TimeSlicing or MPS)
	// every request there must be configured with; "*" is every namespace without an entry.
	RequiredSharing map[string]v1beta1.SharingStrategy `json:"requiredSharing,omitempty"`
}

// Policy rule names, as they appear in violations.
const (
	PolicyBlockedProfile  = "blocked-mig-profile"
	PolicyAllowedProfiles = "allowed-mig-profiles"
	PolicyMaxGPUs         = "max-gpus-per-claim"
	PolicySharing         = "required-sharing"
)

// ParsePolicy reads a policy from YAML or JSON, strictly, and validates it.
func ParsePolicy(data []byte) (*Policy, error) {
	p := &Policy{}
	if err := input.UnmarshalStrict(data, p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate checks profile names and patterns, the GPU limit and the strategies.
func (p *Policy) Validate() error {
	if p == nil {
		return fmt.Errorf("policy is nil")
	}
	var errs field.ErrorList
	for name, list := range map[string][]string{"allowedMIGProfiles": p.AllowedMIGProfiles, "blockedMIGProfiles": p.BlockedMIGProfiles} {
		for i, e := range list {
			if _, err := path.Match(e, ""); err != nil {
				errs = append(errs, field.Invalid(field.NewPath(name).Index(i), e, "bad pattern: "+err.Error()))
			} else if !strings.ContainsAny(e, "*?[") {
				if _, err := mig.ParseProfile(e); err != nil {
					errs = append(errs, field.Invalid(field.NewPath(name).Index(i), e, err.Error()))
				}
			}
		}
	}
	if p.MaxGPUsPerClaim < 0 {
		errs = append(errs, field.Invalid(field.NewPath("maxGPUsPerClaim"), p.MaxGPUsPerClaim, "must not be negative"))
	}
	for _, ns := range sortedStrategyKeys(p.RequiredSharing) {
		switch s := p.RequiredSharing[ns]; s {
		case v1beta1.StrategyExclusive, v1beta1.StrategyTimeSlicing, v1beta1.StrategyMPS:
		default:
			errs = append(errs, field.NotSupported(field.NewPath("requiredSharing").Key(ns), s,
				[]string{string(v1beta1.StrategyExclusive), string(v1beta1.StrategyTimeSlicing), string(v1beta1.StrategyMPS)}))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("policy: %w", errs.ToAggregate())
	}
	return nil
}

// Violation is a request that breaks a policy rule.
type Violation struct {
	// Object is the claim or template ("ResourceClaimTemplate default/mig-invalid-template").
	Object string `json:"object"`
	// Request is the request name ("gpu", "gpu/whole" for a subrequest), empty for rules on
	// the whole claim.
	Request string `json:"request,omitempty"`
	// Rule is one of the Policy* rule names.
	Rule string `json:"rule"`
	// Message says what the request asks for and what the policy allows.
	Message string `json:"message"`
	// UsedBy lists the Pods, Deployments and Jobs of the manifest that use the object.
	UsedBy []string `json:"usedBy,omitempty"`
}

// String formats the violation on one line.
func (v Violation) String() string {
	s := fmt.Sprintf("%s: %s", v.Object, v.Rule)
	if v.Request != "" {
		s = fmt.Sprintf("%s request %s: %s", v.Object, v.Request, v.Rule)
	}
	s += ": " + v.Message
	if len(v.UsedBy) > 0 {
		s += " (used by " + strings.Join(v.UsedBy, ", ") + ")"
	}
	return s
}

// Evaluate checks the ResourceClaims and ResourceClaimTemplates of a manifest against the
// policy. What a request selects is read from its selectors (profile and type literals) and,
// with a machine (Environment.Slices), from the devices it matches there. Pods, Deployments and
// Jobs are checked through the claims and templates they use; objects without a namespace are
// in Environment.Namespace.
func (p *Policy) Evaluate(ctx context.Context, objs []manifest.Object, env Environment) []Violation {
	if p == nil {
		return nil
	}
	st := env.WithDefaults()
	var devices []*selectors.Device
	if st.Slices != nil {
		devices = selectors.DevicesFromSlices(st.Slices)
	}
	classes := request.KnownClasses(st.DriverName, st.DeviceClasses, objs)
	users := usersOf(objs)
	var out []Violation
	for _, o := range objs {
		spec, specPath := manifest.ClaimSpec(o.Object)
		if spec == nil {
			continue
		}
		ns := o.Namespace
		if ns == "" {
			ns = st.Namespace
		}
		vs := p.claim(ctx, st, spec, field.NewPath(specPath), classes, devices, ns)
		for i := range vs {
			vs[i].Object = o.String()
			vs[i].UsedBy = users[o.Kind+"/"+o.Name]
		}
		out = append(out, vs...)
	}
	return out
}

func (p *Policy) claim(ctx context.Context, st Environment, spec *resourceapi.ResourceClaimSpec, specPath *field.Path, classes map[string]*resourceapi.DeviceClass, devices []*selectors.Device, ns string) []Violation {
	var out []Violation
	gpus, unbounded := int64(0), false
	var gpuRequests []string
	perRequest := map[string]int64{}
	for _, ri := range request.Of(spec, specPath, classes) {
		ri.Analyze(ctx, st.Compiler, st.DriverName, devices)
		out = append(out, p.profiles(ri)...)
		out = append(out, p.sharing(spec, ri, st.DriverName, ns)...)
		if ri.IsGPU() {
			parent := strings.SplitN(ri.Name, "/", 2)[0]
			if ri.All {
				unbounded = true
			}
			if ri.Count > perRequest[parent] {
				perRequest[parent] = ri.Count // of subrequests, the largest alternative
			}
			gpuRequests = append(gpuRequests, ri.Name)
		}
	}
	for _, n := range perRequest {
		gpus += n
	}
	if p.MaxGPUsPerClaim > 0 && (unbounded || gpus > int64(p.MaxGPUsPerClaim)) {
		n := fmt.Sprint(gpus)
		if unbounded {
			n = "all"
		}
		out = append(out, Violation{Rule: PolicyMaxGPUs, Request: strings.Join(gpuRequests, ","),
			Message: fmt.Sprintf("the claim can allocate %s full GPUs; the policy allows at most %d per claim", n, p.MaxGPUsPerClaim)})
	}
	return out
}

func (p *Policy) profiles(ri request.Info) []Violation {
	var out []Violation
	for _, prof := range text.SortedKeys(ri.Profiles) {
		if pat, ok := matchAny(prof, p.BlockedMIGProfiles); ok {
			out = append(out, Violation{Request: ri.Name, Rule: PolicyBlockedProfile,
				Message: fmt.Sprintf("selects MIG profile %s, which the policy blocks (%s)", prof, pat)})
		}
		if len(p.AllowedMIGProfiles) > 0 {
			if _, ok := matchAny(prof, p.AllowedMIGProfiles); !ok {
				out = append(out, Violation{Request: ri.Name, Rule: PolicyAllowedProfiles,
					Message: fmt.Sprintf("selects MIG profile %s; the policy allows only %s", prof, strings.Join(p.AllowedMIGProfiles, ", "))})
			}
		}
	}
	if len(p.AllowedMIGProfiles) > 0 && ri.IsMIG() && len(ri.Profiles) == 0 {
		out = append(out, Violation{Request: ri.Name, Rule: PolicyAllowedProfiles,
			Message: fmt.Sprintf("selects MIG devices of any profile; the policy allows only %s: select the profile", strings.Join(p.AllowedMIGProfiles, ", "))})
	}
	return out
}

func (p *Policy) sharing(spec *resourceapi.ResourceClaimSpec, ri request.Info, driver, ns string) []Violation {
	want, ok := p.RequiredSharing[ns]
	if !ok {
		want, ok = p.RequiredSharing["*"]
	}
	if !ok {
		return nil
	}
	got, decoded := request.Strategy(spec, ri, driver)
	switch {
	case !decoded:
		return []Violation{{Request: ri.Name, Rule: PolicySharing,
			Message: fmt.Sprintf("namespace %s requires sharing strategy %s; the request's opaque configuration does not decode", ns, want)}}
	case got != want:
		return []Violation{{Request: ri.Name, Rule: PolicySharing,
			Message: fmt.Sprintf("namespace %s requires sharing strategy %s; the request is configured for %s", ns, want, got)}}
	}
	return nil
}

func matchAny(name string, patterns []string) (string, bool) {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, name); ok {
			return pat, true
		}
	}
	return "", false
}

// usersOf maps "Kind/name" of claims and templates to the workloads that use them.
func usersOf(objs []manifest.Object) map[string][]string {
	out := map[string][]string{}
	for _, o := range objs {
		spec, _ := manifest.PodSpec(o.Object)
		if spec == nil {
			continue
		}
		for _, rc := range spec.ResourceClaims {
			if rc.ResourceClaimName != nil {
				out["ResourceClaim/"+*rc.ResourceClaimName] = append(out["ResourceClaim/"+*rc.ResourceClaimName], o.String())
			}
			if rc.ResourceClaimTemplateName != nil {
				out["ResourceClaimTemplate/"+*rc.ResourceClaimTemplateName] = append(out["ResourceClaimTemplate/"+*rc.ResourceClaimTemplateName], o.String())
			}
		}
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

func sortedStrategyKeys(m map[string]v1beta1.SharingStrategy) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
