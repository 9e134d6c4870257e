package check

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/manifest"
)

// stableVersion matches the versions a default API server serves for built-in groups: since
// v1.24 beta versions of new APIs are off by default, and v1.37 disables every beta and alpha
// version of the groups it has (resource.k8s.io/v1beta1 and v1beta2 included).
var stableVersion = regexp.MustCompile(`^v[0-9]+$`)

// servesByDefault reports whether a default v1.37 API server serves gv: a stable version of a
// group the client library knows.
func servesByDefault(gv schema.GroupVersion) bool {
	return stableVersion.MatchString(gv.Version) && scheme.Scheme.IsVersionRegistered(gv)
}

// ParseAPIVersions checks a list of apiVersions ("group/version", or "v1" for the core group),
// as WithAPIVersions takes them.
func ParseAPIVersions(list []string) ([]schema.GroupVersion, error) {
	out := make([]schema.GroupVersion, 0, len(list))
	for _, s := range list {
		gv, err := schema.ParseGroupVersion(s)
		if err != nil || gv.Version == "" || (gv.Group != "" && len(validation.IsDNS1123Subdomain(gv.Group)) > 0) {
			return nil, fmt.Errorf("apiVersion %q: want GROUP/VERSION such as resource.k8s.io/v1beta2, or v1", s)
		}
		out = append(out, gv)
	}
	return out, nil
}

// apiServerFindings are what a default API server (plus the Checker's extra apiVersions) would
// refuse in objs before any admission: an empty manifest (when every document decoded),
// apiVersions and kinds it does not serve, invalid names, invalid counts.
func (c *Checker) apiServerFindings(objs []manifest.Object, decoded bool) []finding.Finding {
	if len(objs) == 0 && decoded {
		return []finding.Finding{{Severity: finding.SeverityError, Rule: finding.RuleEmpty,
			Message: "the manifest holds no object; kubectl apply refuses it (no objects passed to apply)"}}
	}
	var fs []finding.Finding
	for _, o := range objs {
		if f, ok := c.served(o); !ok {
			fs = append(fs, f)
			continue
		}
		fs = append(fs, nameFindings(o)...)
		fs = append(fs, countFindings(o)...)
	}
	return fs
}

// served checks the object's apiVersion and kind.
func (c *Checker) served(o manifest.Object) (finding.Finding, bool) {
	f := finding.Finding{Severity: finding.SeverityError, Object: o.String(), Field: "apiVersion"}
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil || o.APIVersion == "" {
		f.Rule, f.Message = finding.RuleNotServed, fmt.Sprintf("apiVersion %q is not GROUP/VERSION", o.APIVersion)
		return f, false
	}
	if servesComputeDomain(gv, o.Kind) {
		return f, true // the compute-domain driver's CRD
	}
	extra := slices.Contains(c.apiVersions, gv)
	if !extra && !servesByDefault(gv) {
		f.Rule = finding.RuleNotServed
		f.Message = fmt.Sprintf("a default Kubernetes v1.37 API server does not serve %s%s", o.APIVersion, servedHint(gv))
		f.Suggestion = "use a served apiVersion, or declare the versions your cluster enables (--api-versions)"
		return f, false
	}
	if !extra && !scheme.Scheme.Recognizes(gv.WithKind(o.Kind)) {
		f.Rule, f.Field = finding.RuleUnknownKind, "kind"
		f.Message = fmt.Sprintf("%s has no kind %q", o.APIVersion, o.Kind)
		return f, false
	}
	return f, true
}

// servedHint names the served versions of gv's group.
func servedHint(gv schema.GroupVersion) string {
	var served []string
	for _, v := range scheme.Scheme.PrioritizedVersionsForGroup(gv.Group) {
		if servesByDefault(v) {
			served = append(served, v.String())
		}
	}
	if len(served) == 0 {
		return ""
	}
	return " (it serves " + strings.Join(served, ", ") + ")"
}

// nameFindings checks metadata.name (a DNS subdomain, required) and metadata.namespace (a DNS
// label) as the API server does for the kinds the package decodes.
func nameFindings(o manifest.Object) []finding.Finding {
	if o.Object == nil {
		return nil
	}
	var fs []finding.Finding
	add := func(field, msg string) {
		fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleInvalidName, Object: o.String(), Field: field, Message: msg})
	}
	switch errs := validation.IsDNS1123Subdomain(o.Name); {
	case o.Name == "":
		add("metadata.name", "Required value: the API server refuses an object without a name")
	case len(errs) > 0:
		add("metadata.name", fmt.Sprintf("%q: %s", o.Name, strings.Join(errs, "; ")))
	}
	if o.Namespace != "" {
		if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
			add("metadata.namespace", fmt.Sprintf("%q: %s", o.Namespace, strings.Join(errs, "; ")))
		}
	}
	return fs
}

// countFindings checks the allocation mode and count of a claim's requests: a known mode, a
// count positive for ExactCount (0 is defaulted to 1) and unset for All.
func countFindings(o manifest.Object) []finding.Finding {
	spec, path := manifest.ClaimSpec(o.Object)
	if spec == nil {
		return nil
	}
	var fs []finding.Finding
	check := func(field string, mode resourceapi.DeviceAllocationMode, count int64) {
		msg := ""
		switch {
		case mode != "" && mode != resourceapi.DeviceAllocationModeExactCount && mode != resourceapi.DeviceAllocationModeAll:
			field = strings.TrimSuffix(field, "count") + "allocationMode"
			msg = fmt.Sprintf("Unsupported value: %q: supported values: %q, %q", mode,
				resourceapi.DeviceAllocationModeAll, resourceapi.DeviceAllocationModeExactCount)
		case count < 0:
			msg = fmt.Sprintf("Invalid value: %d: must be greater than zero", count)
		case mode == resourceapi.DeviceAllocationModeAll && count != 0:
			msg = fmt.Sprintf("Invalid value: %d: must not be set when allocationMode is All", count)
		default:
			return
		}
		fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleInvalidRequest, Object: o.String(), Field: field, Message: msg})
	}
	for i, r := range spec.Devices.Requests {
		p := fmt.Sprintf("%s.devices.requests[%d]", path, i)
		if r.Exactly != nil {
			check(p+".exactly.count", r.Exactly.AllocationMode, r.Exactly.Count)
		}
		for j, s := range r.FirstAvailable {
			check(fmt.Sprintf("%s.firstAvailable[%d].count", p, j), s.AllocationMode, s.Count)
		}
	}
	return fs
}

// kindlessFindings are the documents of data that hold data but no kind or apiVersion: the
// API server cannot take them, and manifest.Decode skips them as it skips comment-only documents.
func kindlessFindings(data []byte) []finding.Finding {
	docs, err := manifest.SplitDocuments(data)
	if err != nil {
		return nil // manifest.Decode reports it
	}
	var fs []finding.Finding
	for i, d := range docs {
		tm, _, err := manifest.Meta(d)
		if err != nil || tm.Kind != "" {
			continue
		}
		js, err := yaml.YAMLToJSON(d)
		if err != nil || string(js) == "null" {
			continue
		}
		fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleMissingKind, Object: fmt.Sprintf("document %d", i), Field: "kind",
			Message: "Required value: the document holds data but no kind; the API server cannot take it"})
	}
	return fs
}
