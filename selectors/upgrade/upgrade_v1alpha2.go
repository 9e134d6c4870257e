package upgrade

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/internal/text"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// Legacy NVIDIA claim parameter kinds (gpu.resource.nvidia.com/v1alpha1). MigClaimParameters is
// the name NVIDIA's 2023 talks used; the API itself called it MigDeviceClaimParameters.
const (
	legacyGroup            = "gpu.resource.nvidia.com"
	kindGpuClaimParameters = "GpuClaimParameters"
	kindMigClaimParameters = "MigClaimParameters"
	kindMigDeviceParams    = "MigDeviceClaimParameters"
	kindVfioParams         = "VfioGpuClaimParameters"
)

func isLegacyParams(h docHead) bool {
	if !h.ok || !strings.HasSuffix(h.kind, "ClaimParameters") {
		return false
	}
	g := h.group()
	return g == legacyGroup || strings.HasSuffix(g, ".nvidia.com")
}

// podKinds are the kinds with a pod spec, and the path to it.
var podKinds = map[string][]string{
	"Pod":         {"spec"},
	"Deployment":  {"spec", "template", "spec"},
	"StatefulSet": {"spec", "template", "spec"},
	"DaemonSet":   {"spec", "template", "spec"},
	"ReplicaSet":  {"spec", "template", "spec"},
	"Job":         {"spec", "template", "spec"},
	"CronJob":     {"spec", "jobTemplate", "spec", "template", "spec"},
}

// alpha converts resource.k8s.io/v1alpha2 objects.
func (r *upgradeRun) alpha(h docHead, doc []byte) ([]byte, bool) {
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		r.fail(h.String(), "", err.Error())
		return nil, true
	}
	switch h.kind {
	case "ResourceClaim":
		if !r.onlyKeys(h, nil, m, "apiVersion", "kind", "metadata", "spec", "status") {
			return nil, true
		}
		spec := mapAt(m, "spec")
		if _, nested := spec["spec"]; nested {
			r.fail(h.String(), "spec.spec", "a ResourceClaim's spec holds resourceClassName and parametersRef directly (spec.spec is the layout of a ResourceClaimTemplate)")
			return nil, true
		}
		cs, ok := r.claimSpec(h, field.NewPath("spec"), spec)
		if !ok {
			return nil, true
		}
		claim := &resourceapi.ResourceClaim{ObjectMeta: objectMeta(m["metadata"]), Spec: *cs}
		r.change(finding.SeverityError, h.String(), "apiVersion", "resource.k8s.io/v1alpha2 (classic DRA) is no longer served; converted to resource.k8s.io/v1 structured parameters")
		return r.encode(h, claim)
	case "ResourceClaimTemplate":
		if !r.onlyKeys(h, nil, m, "apiVersion", "kind", "metadata", "spec") {
			return nil, true
		}
		spec := mapAt(m, "spec")
		if _, flat := spec["resourceClassName"]; flat {
			r.fail(h.String(), "spec.resourceClassName", "a ResourceClaimTemplate holds the claim spec under spec.spec (spec.spec.resourceClassName)")
			return nil, true
		}
		if !r.onlyKeys(h, field.NewPath("spec"), spec, "metadata", "spec") {
			return nil, true
		}
		cs, ok := r.claimSpec(h, field.NewPath("spec", "spec"), mapAt(spec, "spec"))
		if !ok {
			return nil, true
		}
		t := &resourceapi.ResourceClaimTemplate{ObjectMeta: objectMeta(m["metadata"]),
			Spec: resourceapi.ResourceClaimTemplateSpec{ObjectMeta: objectMeta(spec["metadata"]), Spec: *cs}}
		r.change(finding.SeverityError, h.String(), "apiVersion", "resource.k8s.io/v1alpha2 (classic DRA) is no longer served; converted to resource.k8s.io/v1 structured parameters")
		return r.encode(h, t)
	case "ResourceClass":
		return r.resourceClass(h, m)
	}
	r.fail(h.String(), "kind", fmt.Sprintf("resource.k8s.io/v1alpha2 %s has no resource.k8s.io/v1 equivalent", h.kind))
	return nil, true
}

// markReferenced marks the claim parameters a v1alpha2 claim or template references, so that
// parameters are reported as unused only when nothing references them.
func (r *upgradeRun) markReferenced(h docHead, doc []byte) {
	if h.apiVersion != "resource.k8s.io/v1alpha2" {
		return
	}
	var m map[string]any
	if yaml.Unmarshal(doc, &m) != nil {
		return
	}
	spec := mapAt(m, "spec")
	for _, s := range []map[string]any{spec, mapAt(spec, "spec")} {
		if ref := mapAt(s, "parametersRef"); ref != nil {
			kind, _ := ref["kind"].(string)
			name, _ := ref["name"].(string)
			for _, ns := range []string{h.namespace, ""} {
				if _, ok := r.params[kind+"/"+ns+"/"+name]; ok {
					r.used[kind+"/"+ns+"/"+name] = true
				}
			}
		}
	}
}

// claimSpec converts a v1alpha2 claim spec (resourceClassName, parametersRef, allocationMode).
func (r *upgradeRun) claimSpec(h docHead, path *field.Path, spec map[string]any) (*resourceapi.ResourceClaimSpec, bool) {
	if !r.onlyKeys(h, path, spec, "resourceClassName", "parametersRef", "allocationMode") {
		return nil, false
	}
	class, _ := spec["resourceClassName"].(string)
	if class == "" {
		r.fail(h.String(), path.Child("resourceClassName").String(), "required: the DeviceClass to allocate from")
		return nil, false
	}
	if !r.allocationMode(h, path.Child("allocationMode"), spec["allocationMode"]) {
		return nil, false
	}
	req := resourceapi.ExactDeviceRequest{DeviceClassName: class}
	reqName := "gpu"
	var cfg []byte
	if ref := mapAt(spec, "parametersRef"); ref != nil {
		p, ok := r.resolveParams(h, path.Child("parametersRef"), ref)
		if !ok {
			return nil, false
		}
		conv, ok := r.convertParams(p)
		if !ok {
			return nil, false
		}
		req.Count, cfg = conv.count, conv.config
		if conv.selector != "" {
			req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: conv.selector}}}
		}
		if conv.mig {
			reqName = "mig"
			if class == r.u.gpuClass() {
				req.DeviceClassName = r.u.migClass()
				r.change(finding.SeverityInfo, h.String(), path.Child("resourceClassName").String(),
					fmt.Sprintf("MIG devices have their own DeviceClass in v1: %s instead of %s", r.u.migClass(), class))
			}
		}
		if conv.vfio && class != r.u.vfioClass() {
			req.DeviceClassName = r.u.vfioClass()
			r.change(finding.SeverityInfo, h.String(), path.Child("resourceClassName").String(),
				fmt.Sprintf("GPUs passed through to a virtual machine have their own DeviceClass in v1: %s instead of %s (the driver publishes them with --passthrough)", r.u.vfioClass(), class))
		}
		r.change(finding.SeverityInfo, h.String(), path.Child("parametersRef").String(),
			fmt.Sprintf("%s %s inlined: %s", p.head.kind, p.head.name, conv.summary))
	}
	if req.Count == 1 {
		req.Count = 0 // the API server's default; the seed workloads leave it out too
	}
	out := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: reqName, Exactly: &req}},
	}}
	if cfg != nil {
		out.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{reqName},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: r.u.driver, Parameters: runtime.RawExtension{Raw: cfg}}}}}
	}
	return out, true
}

func (r *upgradeRun) allocationMode(h docHead, path *field.Path, v any) bool {
	switch v {
	case nil, "WaitForFirstConsumer":
		return true
	case "Immediate":
		r.change(finding.SeverityWarning, h.String(), path.String(), "Immediate allocation has no v1 equivalent: a v1 claim is allocated when the first pod that uses it is scheduled; dropped")
		return true
	}
	r.fail(h.String(), path.String(), fmt.Sprintf("unsupported value %v (allowed: WaitForFirstConsumer, Immediate)", v))
	return false
}

func (r *upgradeRun) resolveParams(h docHead, path *field.Path, ref map[string]any) (paramsDoc, bool) {
	if !r.onlyKeys(h, path, ref, "apiGroup", "kind", "name") {
		return paramsDoc{}, false
	}
	kind, _ := ref["kind"].(string)
	name, _ := ref["name"].(string)
	group, _ := ref["apiGroup"].(string)
	for _, ns := range []string{h.namespace, ""} {
		key := kind + "/" + ns + "/" + name
		if p, ok := r.params[key]; ok {
			r.used[key] = true
			if group != legacyGroup || p.head.group() != legacyGroup {
				r.change(finding.SeverityWarning, h.String(), path.Child("apiGroup").String(),
					fmt.Sprintf("NVIDIA's claim parameters were in API group %s, not %s; converted as if they were", legacyGroup, group))
			}
			return p, true
		}
	}
	r.fail(h.String(), path.String(), fmt.Sprintf("references %s %q, which is not in the input: add it so that it can be converted", kind, name))
	return paramsDoc{}, false
}

// convertedParams is what claim parameters become.
type convertedParams struct {
	count    int64
	selector string
	config   []byte
	mig      bool
	vfio     bool
	summary  string
}

func (r *upgradeRun) convertParams(p paramsDoc) (convertedParams, bool) {
	var m map[string]any
	if err := yaml.Unmarshal(p.doc, &m); err != nil {
		r.fail(p.head.String(), "", err.Error())
		return convertedParams{}, false
	}
	if !r.onlyKeys(p.head, nil, m, "apiVersion", "kind", "metadata", "spec") {
		return convertedParams{}, false
	}
	spec := mapAt(m, "spec")
	switch p.head.kind {
	case kindGpuClaimParameters:
		return r.gpuParams(p.head, spec)
	case kindMigClaimParameters, kindMigDeviceParams:
		return r.migParams(p.head, spec)
	case kindVfioParams:
		return r.vfioParams(p.head, spec)
	default:
		r.fail(p.head.String(), "kind", fmt.Sprintf("unknown claim parameters kind (known: %s, %s, %s)", kindGpuClaimParameters, kindMigClaimParameters, kindVfioParams))
	}
	return convertedParams{}, false
}

func (r *upgradeRun) gpuParams(h docHead, spec map[string]any) (convertedParams, bool) {
	path := field.NewPath("spec")
	if !r.onlyKeys(h, path, spec, "count", "selector", "sharing") {
		return convertedParams{}, false
	}
	out := convertedParams{count: 1}
	var parts []string
	ok := true
	if c, present := spec["count"]; present {
		n, isInt := asInt(c)
		if !isInt || n < 1 || n > resourceapi.AllocationResultsMaxSize {
			r.fail(h.String(), path.Child("count").String(), fmt.Sprintf("must be a whole number from 1 to %d, got %v", resourceapi.AllocationResultsMaxSize, c))
			ok = false
		}
		out.count = n
		parts = append(parts, fmt.Sprintf("count %d", n))
	}
	if sel, present := spec["selector"]; present {
		expr, good := r.selector(h, path.Child("selector"), sel, 0)
		ok = ok && good
		out.selector = expr
		parts = append(parts, "selector → CEL")
	}
	if sh, present := spec["sharing"]; present {
		cfg, good := r.sharing(h, path, sh, v1beta1.GpuConfigKind)
		ok = ok && good
		out.config = cfg
		parts = append(parts, "sharing → GpuConfig")
	}
	out.summary = strings.Join(parts, ", ")
	if out.summary == "" {
		out.summary = "nothing to convert"
	}
	return out, ok
}

// vfioParams converts VfioGpuClaimParameters: a GPU passed through to a virtual machine, which
// v1 requests from the DeviceClass of vfio devices, with the same count and selector as a GPU.
// Sharing does not apply to a GPU a virtual machine owns.
func (r *upgradeRun) vfioParams(h docHead, spec map[string]any) (convertedParams, bool) {
	if !r.onlyKeys(h, field.NewPath("spec"), spec, "count", "selector") {
		return convertedParams{}, false
	}
	if sel, ok := spec["selector"].(map[string]any); ok && len(sel) == 0 {
		// The seed's slide shows "selector: {}" for a selector it elides: no condition.
		spec = maps.Clone(spec)
		delete(spec, "selector")
		r.change(finding.SeverityWarning, h.String(), "spec.selector", "empty selector: any GPU the driver publishes for passthrough")
	}
	out, ok := r.gpuParams(h, spec)
	out.vfio = true
	return out, ok
}

func (r *upgradeRun) migParams(h docHead, spec map[string]any) (convertedParams, bool) {
	path := field.NewPath("spec")
	if _, ok := spec["gpuClaimName"]; ok {
		r.fail(h.String(), path.Child("gpuClaimName").String(),
			fmt.Sprintf("no v1 equivalent for tying a MIG device to another claim's GPU: request the GPU's MIG devices in one claim with a matchAttribute constraint on %s/%s", r.u.driver, gpudra.AttrParentUUID))
		return convertedParams{}, false
	}
	if !r.onlyKeys(h, path, spec, "profile", "sharing") {
		return convertedParams{}, false
	}
	out := convertedParams{count: 1, mig: true}
	profile, _ := spec["profile"].(string)
	if _, err := mig.ParseProfile(profile); err != nil {
		r.fail(h.String(), path.Child("profile").String(), err.Error())
		return convertedParams{}, false
	}
	expr, err := r.u.builder.Profiles(profile)
	if err != nil {
		r.fail(h.String(), path.Child("profile").String(), err.Error())
		return convertedParams{}, false
	}
	out.selector = expr
	out.summary = "profile " + profile + " → CEL"
	if sh, present := spec["sharing"]; present {
		cfg, ok := r.sharing(h, path, sh, v1beta1.MigDeviceConfigKind)
		if !ok {
			return convertedParams{}, false
		}
		out.config = cfg
		out.summary += ", sharing → MigDeviceConfig"
	}
	return out, true
}

// sharing turns a v1alpha1 sharing section into the driver's opaque configuration, through the
// strict resource.nvidia.com/v1beta1 decoder (which accepts the old field names it can map).
func (r *upgradeRun) sharing(h docHead, specPath *field.Path, sh any, kind string) ([]byte, bool) {
	path := specPath.Child("sharing")
	if m, ok := sh.(map[string]any); ok && m["strategy"] == "MIG" {
		r.fail(h.String(), path.Child("strategy").String(), "MIG is not a sharing strategy (TimeSlicing, MPS): request a MIG device with MigClaimParameters (profile), which becomes a request of DeviceClass "+r.u.migClass())
		return nil, false
	}
	raw, err := json.Marshal(map[string]any{"apiVersion": v1beta1.APIVersion, "kind": kind, "sharing": sh})
	if err != nil {
		r.fail(h.String(), path.String(), err.Error())
		return nil, false
	}
	cfg, err := r.u.decoder.DecodeAt(raw, specPath)
	if err != nil {
		r.fail(h.String(), path.String(), "no resource.nvidia.com/v1beta1 "+kind+" equivalent: "+err.Error())
		return nil, false
	}
	out, err := r.u.decoder.Encode(cfg)
	if err != nil {
		r.fail(h.String(), path.String(), err.Error())
		return nil, false
	}
	return out, true
}

// selectorProperties are the GpuSelectorProperties of gpu.resource.nvidia.com/v1alpha1.
var selectorProperties = []string{"index", "uuid", "migEnabled", "memory", "productName", "brand", "architecture",
	"cudaComputeCapability", "driverVersion", "cudaDriverVersion"}

// selector converts a GpuSelector (one property, or andExpression/orExpression of selectors,
// three levels deep at most) to CEL.
func (r *upgradeRun) selector(h docHead, path *field.Path, node any, depth int) (string, bool) {
	m, isMap := node.(map[string]any)
	if !isMap || len(m) == 0 {
		r.fail(h.String(), path.String(), fmt.Sprintf("a selector is one property (%s) or andExpression/orExpression, got %v", strings.Join(selectorProperties, ", "), node))
		return "", false
	}
	if depth > 3 {
		r.fail(h.String(), path.String(), "selectors nest at most 3 levels deep")
		return "", false
	}
	if len(m) > 1 {
		r.fail(h.String(), path.String(), fmt.Sprintf("a selector has exactly one property, got %s: combine them with andExpression", strings.Join(text.Keys(m), ", ")))
		for _, k := range text.Keys(m) {
			r.selector(h, path, map[string]any{k: m[k]}, depth) // report what is wrong with each
		}
		return "", false
	}
	key := text.Keys(m)[0]
	val := m[key]
	p := path.Child(key)
	switch key {
	case "andExpression", "orExpression":
		list, ok := val.([]any)
		if !ok || len(list) == 0 {
			r.fail(h.String(), p.String(), "must be a non-empty list of selectors")
			return "", false
		}
		var exprs []string
		good := true
		for i, e := range list {
			x, ok := r.selector(h, p.Index(i), e, depth+1)
			good = good && ok
			exprs = append(exprs, x)
		}
		if key == "andExpression" {
			return selectors.And(exprs...), good
		}
		return selectors.Or(exprs...), good
	}
	return r.property(h, p, key, val)
}

func (r *upgradeRun) property(h docHead, p *field.Path, key string, val any) (string, bool) {
	b := r.u.builder
	switch key {
	case "index":
		n, ok := asInt(val)
		if !ok {
			r.fail(h.String(), p.String(), fmt.Sprintf("must be an integer, got %v", val))
			return "", false
		}
		return fmt.Sprintf("%s == %d", text.Attribute(b.Driver(), string(gpudra.AttrIndex)), n), true
	case "uuid":
		s, ok := val.(string)
		if !ok || s == "" {
			r.fail(h.String(), p.String(), fmt.Sprintf("must be a UUID string, got %v", val))
			return "", false
		}
		return text.Attribute(b.Driver(), string(gpudra.AttrUUID)) + " == " + text.Quote(s), true
	case "migEnabled":
		r.fail(h.String(), p.String(), "no equivalent: a GPU with MIG enabled publishes its MIG devices (class "+r.u.migClass()+"), not itself")
		return "", false
	case "productName", "brand", "architecture":
		s, ok := val.(string)
		if !ok || s == "" {
			r.fail(h.String(), p.String(), fmt.Sprintf("must be a glob pattern string, got %v", val))
			return "", false
		}
		return text.Glob(text.Attribute(b.Driver(), key), s), true
	case "memory":
		return r.quantityComparator(h, p, val)
	case "cudaComputeCapability", "driverVersion", "cudaDriverVersion":
		return r.versionComparator(h, p, resourceapi.QualifiedName(key), val)
	}
	msg := fmt.Sprintf("unknown selector property (allowed: andExpression, orExpression, %s)", strings.Join(selectorProperties, ", "))
	if c := text.Closest(key, selectorProperties); c != "" {
		msg += "; did you mean " + c + "?"
	}
	r.fail(h.String(), p.String(), msg)
	return "", false
}

// comparatorOps maps the v1alpha1 comparator operators to CEL comparisons with compareTo.
var comparatorOps = map[string]string{"Equals": "==", "LessThan": "<", "LessThanOrEqualTo": "<=", "GreaterThan": ">", "GreaterThanOrEqualTo": ">="}

func (r *upgradeRun) comparator(h docHead, p *field.Path, val any) (string, any, bool) {
	m, ok := val.(map[string]any)
	if !ok {
		r.fail(h.String(), p.String(), fmt.Sprintf("must be a comparator {value: ..., operator: %s}, got %v", strings.Join(text.Keys(comparatorOps), "|"), val))
		return "", nil, false
	}
	if !r.onlyKeys(h, p, m, "value", "operator") {
		return "", nil, false
	}
	opName, _ := m["operator"].(string)
	op, ok := comparatorOps[opName]
	if !ok {
		r.fail(h.String(), p.Child("operator").String(), fmt.Sprintf("unsupported value %v (allowed: %s)", m["operator"], strings.Join(text.Keys(comparatorOps), ", ")))
		return "", nil, false
	}
	if m["value"] == nil {
		r.fail(h.String(), p.Child("value").String(), "required")
		return "", nil, false
	}
	return op, m["value"], true
}

func (r *upgradeRun) quantityComparator(h docHead, p *field.Path, val any) (string, bool) {
	op, v, ok := r.comparator(h, p, val)
	if !ok {
		return "", false
	}
	q, err := resource.ParseQuantity(scalarString(v))
	if err != nil {
		r.fail(h.String(), p.Child("value").String(), fmt.Sprintf("%v is not a quantity: %v", v, err))
		return "", false
	}
	return r.u.builder.CompareCapacity(gpudra.CapMemory, op, q), true
}

func (r *upgradeRun) versionComparator(h docHead, p *field.Path, name resourceapi.QualifiedName, val any) (string, bool) {
	op, v, ok := r.comparator(h, p, val)
	if !ok {
		return "", false
	}
	norm, err := selectors.NormalizeVersion(scalarString(v))
	if err != nil {
		r.fail(h.String(), p.Child("value").String(), err.Error())
		return "", false
	}
	return fmt.Sprintf("%s.compareTo(semver(%s)) %s 0", text.Attribute(r.u.builder.Driver(), string(name)), text.Quote(norm), op), true
}

// resourceClass converts a v1alpha2 ResourceClass to a DeviceClass selecting the driver's
// devices, or drops it when the driver ships a class of that name.
func (r *upgradeRun) resourceClass(h docHead, m map[string]any) ([]byte, bool) {
	if !r.onlyKeys(h, nil, m, "apiVersion", "kind", "metadata", "driverName", "parametersRef", "suitableNodes", "structuredParameters") {
		return nil, true
	}
	for _, f := range []string{"parametersRef", "suitableNodes"} {
		if _, ok := m[f]; ok {
			r.fail(h.String(), f, map[string]string{
				"parametersRef": "class parameters have no v1 equivalent; put driver configuration in the DeviceClass's spec.config",
				"suitableNodes": "no v1 equivalent: nodes are chosen by where the driver publishes devices"}[f])
			return nil, true
		}
	}
	for _, c := range selectors.DeviceClasses(r.u.driver) {
		if c.Name == h.name {
			r.change(finding.SeverityError, h.String(), "", fmt.Sprintf("ResourceClasses are no longer served; the driver ships DeviceClass %s itself (examples/deploy/deviceclasses.yaml); removed", c.Name))
			return nil, false
		}
	}
	driver, _ := m["driverName"].(string)
	if driver == "" {
		r.fail(h.String(), "driverName", "required")
		return nil, true
	}
	if driver == legacyGroup {
		driver = r.u.driver
	}
	dc := newDeviceClass(h.name, selectors.For(driver).IsDriver())
	dc.ObjectMeta = objectMeta(m["metadata"])
	r.change(finding.SeverityError, h.String(), "", fmt.Sprintf("ResourceClasses are no longer served; converted to a DeviceClass selecting every device of driver %s", driver))
	return r.encode(docHead{apiVersion: h.apiVersion, kind: "DeviceClass", namespace: h.namespace, name: h.name, ok: true}, dc)
}

// podSources moves resourceClaims[].source.{resourceClaimName,resourceClaimTemplateName} up one
// level, as Kubernetes 1.31 did.
func (r *upgradeRun) podSources(h docHead, doc []byte) ([]byte, bool) {
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return nil, true
	}
	spec := m
	for _, k := range podKinds[h.kind] {
		spec = mapAt(spec, k)
	}
	claims, _ := spec["resourceClaims"].([]any)
	changed := false
	path := field.NewPath(podKinds[h.kind][0], podKinds[h.kind][1:]...).Child("resourceClaims")
	for i, c := range claims {
		cm, ok := c.(map[string]any)
		if !ok {
			continue
		}
		src, ok := cm["source"].(map[string]any)
		if !ok {
			continue
		}
		for k, v := range src {
			if k != "resourceClaimName" && k != "resourceClaimTemplateName" {
				r.fail(h.String(), path.Index(i).Child("source", k).String(), "unknown field of the pre-1.31 claim source")
				return nil, true
			}
			if _, dup := cm[k]; dup {
				r.fail(h.String(), path.Index(i).Child(k).String(), "set both directly and in source")
				return nil, true
			}
			cm[k] = v
		}
		delete(cm, "source")
		changed = true
		r.change(finding.SeverityError, h.String(), path.Index(i).Child("source").String(), "removed in Kubernetes 1.31: its resourceClaimName/resourceClaimTemplateName moved up one level")
	}
	if !changed {
		return nil, true
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		r.fail(h.String(), "", err.Error())
		return nil, true
	}
	return b, false
}

// onlyKeys reports an error for every key of m that is not allowed, with the closest allowed
// name when one is close.
func (r *upgradeRun) onlyKeys(h docHead, path *field.Path, m map[string]any, allowed ...string) bool {
	ok := true
	var bad []string
	for k := range m {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	for _, k := range bad {
		ok = false
		msg := fmt.Sprintf("unknown field (allowed: %s)", strings.Join(allowed, ", "))
		if c := text.Closest(k, allowed); c != "" {
			msg += "; did you mean " + c + "?"
		}
		fp := k
		if path != nil {
			fp = path.Child(k).String()
		}
		r.fail(h.String(), fp, msg)
	}
	return ok
}

func mapAt(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

func objectMeta(v any) metav1.ObjectMeta {
	var om metav1.ObjectMeta
	if b, err := json.Marshal(v); err == nil {
		_ = json.Unmarshal(b, &om)
	}
	return om
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, false
		}
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

// scalarString is a YAML scalar as written: numbers without exponent or trailing zeros.
func scalarString(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// newDeviceClass is a DeviceClass with one CEL selector.
func newDeviceClass(name, expression string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expression}}},
		},
	}
}
