package upgrade

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	drav1beta1 "k8s.io/dynamic-resource-allocation/api/v1beta1"
	drav1beta2 "k8s.io/dynamic-resource-allocation/api/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// Upgrader rewrites manifests written for older DRA APIs into resource.k8s.io/v1:
//
//   - resource.k8s.io/v1beta1 and v1beta2 ResourceClaims, ResourceClaimTemplates and
//     DeviceClasses, with the conversions the API server uses
//     (k8s.io/dynamic-resource-allocation/api): request fields move under exactly;
//   - resource.k8s.io/v1 objects written in the v1beta1 layout (deviceClassName directly in a
//     request), which the API server rejects;
//   - resource.k8s.io/v1alpha2 (classic DRA, Kubernetes 1.26-1.30) ResourceClaims,
//     ResourceClaimTemplates and ResourceClasses, with the parameters they reference from
//     NVIDIA's gpu.resource.nvidia.com/v1alpha1 GpuClaimParameters, MigClaimParameters and
//     VfioGpuClaimParameters turned into CEL selectors, the MIG or vfio DeviceClass and
//     resource.nvidia.com/v1beta1 opaque configuration;
//   - Pods and workloads whose resourceClaims use the removed source field.
//
// What cannot be expressed in v1 is an *UpgradeError naming the object, the field and why.
type Upgrader struct {
	driver  string
	builder selectors.Builder
	decoder *v1beta1.Decoder
}

// NewUpgrader returns an Upgrader for manifests of the given driver ("" means
// gpudra.DefaultDriverName): its DeviceClasses and opaque configuration.
func NewUpgrader(driverName string) *Upgrader {
	b := selectors.For(driverName)
	return &Upgrader{driver: b.Driver(), builder: b, decoder: v1beta1.NewDecoder()}
}

// Upgrade is the result of upgrading a manifest.
type Upgrade struct {
	// Manifest is the input with every object it could convert in its v1 form. Documents that
	// needed no change keep their text and comments (the whole input is returned byte for byte
	// when nothing changed); converted documents are re-encoded; objects that could not be
	// converted are kept as they were.
	Manifest []byte
	// Changes says what was changed and why, per object.
	Changes []Change
}

// Changed reports whether the upgrade changed anything.
func (u *Upgrade) Changed() bool { return len(u.Changes) > 0 }

// Change is one thing an upgrade changed.
type Change struct {
	// Severity is SeverityError when the API server rejects the original object (a removed API
	// version or field), SeverityWarning when the original uses a deprecated version, and
	// SeverityInfo for what follows from those.
	Severity finding.Severity `json:"severity"`
	// Rule is the lint rule the change also fixes, if any (RuleMissingExactly).
	Rule string `json:"rule,omitempty"`
	// Object is the object changed ("ResourceClaim default/gpu").
	Object string `json:"object"`
	// Field is the field path in the original object, empty for the whole object.
	Field string `json:"field,omitempty"`
	// Message says what changed and why.
	Message string `json:"message"`
}

// UpgradeError is an object, or a field of one, that has no resource.k8s.io/v1 equivalent.
type UpgradeError struct {
	// Object is the object that cannot be upgraded ("GpuClaimParameters default/p").
	Object string
	// Field is the field path in the original object, empty for the whole object.
	Field string
	// Reason says why it has no resource.k8s.io/v1 equivalent.
	Reason string
}

// Error implements error.
func (e *UpgradeError) Error() string {
	if e.Field == "" {
		return e.Object + ": " + e.Reason
	}
	return e.Object + ": " + e.Field + ": " + e.Reason
}

// Upgrade upgrades a multi-document manifest. The error joins every *UpgradeError (errors.As
// finds them); the Upgrade is returned even then, with what could be converted.
func (u *Upgrader) Upgrade(data []byte) (*Upgrade, error) {
	docs, err := manifest.SplitDocuments(data)
	if err != nil {
		return nil, err
	}
	run := &upgradeRun{u: u, params: map[string]paramsDoc{}, used: map[string]bool{}}
	heads := make([]docHead, len(docs))
	for i, d := range docs {
		heads[i] = readHead(d)
		if isLegacyParams(heads[i]) {
			run.params[heads[i].key()] = paramsDoc{head: heads[i], doc: d}
		}
	}
	for i, d := range docs {
		run.markReferenced(heads[i], d)
	}
	var out [][]byte
	changed := false
	for i, d := range docs {
		conv, keep := run.document(heads[i], d)
		switch {
		case conv != nil:
			out, changed = append(out, conv), true
		case keep:
			out = append(out, d)
		default:
			changed = true
		}
	}
	for key, p := range run.params {
		if !run.used[key] {
			run.change(finding.SeverityError, p.head.String(), "", "gpu.resource.nvidia.com claim parameters are not served by a v1 cluster and no claim in the manifest references these; removed")
		}
	}
	manifest := data // nothing converted: the input as it was, byte for byte
	if changed {
		manifest = joinDocuments(out)
	}
	return &Upgrade{Manifest: manifest, Changes: run.changes}, errors.Join(run.errs...)
}

// docHead is what identifies a document.
type docHead struct {
	apiVersion, kind, namespace, name string
	ok                                bool
}

func readHead(doc []byte) docHead {
	tm, om, err := manifest.Meta(doc)
	if err != nil || tm.Kind == "" {
		return docHead{}
	}
	return docHead{apiVersion: tm.APIVersion, kind: tm.Kind, namespace: om.Namespace, name: om.Name, ok: true}
}

func (h docHead) String() string {
	return manifest.Object{Kind: h.kind, Namespace: h.namespace, Name: h.name}.String()
}

func (h docHead) key() string { return h.kind + "/" + h.namespace + "/" + h.name }

func (h docHead) group() string {
	if i := strings.LastIndex(h.apiVersion, "/"); i >= 0 {
		return h.apiVersion[:i]
	}
	return ""
}

type paramsDoc struct {
	head docHead
	doc  []byte
}

// upgradeRun is the state of one Upgrade call.
type upgradeRun struct {
	u       *Upgrader
	params  map[string]paramsDoc
	used    map[string]bool
	changes []Change
	errs    []error
}

func (r *upgradeRun) change(sev finding.Severity, object, fieldPath, msg string) {
	r.changes = append(r.changes, Change{Severity: sev, Object: object, Field: fieldPath, Message: msg})
}

func (r *upgradeRun) fail(object, fieldPath, reason string) {
	r.errs = append(r.errs, &UpgradeError{Object: object, Field: fieldPath, Reason: reason})
}

// document upgrades one document: it returns the new document, or keep=true to keep the
// original, or neither to drop it.
func (r *upgradeRun) document(h docHead, doc []byte) (out []byte, keep bool) {
	if !h.ok {
		return nil, true
	}
	switch {
	case h.apiVersion == "resource.k8s.io/v1beta1" || h.apiVersion == "resource.k8s.io/v1beta2":
		return r.beta(h, doc)
	case h.apiVersion == "resource.k8s.io/v1":
		return r.misshapedV1(h, doc)
	case h.apiVersion == "resource.k8s.io/v1alpha2":
		return r.alpha(h, doc)
	case isLegacyParams(h):
		return nil, false // consumed by the claims that reference them
	case podKinds[h.kind] != nil:
		return r.podSources(h, doc)
	}
	return nil, true
}

// beta converts resource.k8s.io/v1beta1 and v1beta2 objects with the upstream conversions.
func (r *upgradeRun) beta(h docHead, doc []byte) ([]byte, bool) {
	in, out := betaTypes(h.apiVersion, h.kind)
	if in == nil {
		return nil, true
	}
	if err := yaml.UnmarshalStrict(doc, in); err != nil {
		r.fail(h.String(), "", fmt.Sprintf("decode %s: %v", h.apiVersion, err))
		return nil, true
	}
	if err := convertBeta(in, out); err != nil {
		r.fail(h.String(), "", fmt.Sprintf("convert %s to resource.k8s.io/v1: %v", h.apiVersion, err))
		return nil, true
	}
	r.change(finding.SeverityWarning, h.String(), "apiVersion", fmt.Sprintf("%s is deprecated; converted to resource.k8s.io/v1 as the API server converts it", h.apiVersion))
	r.noteExactly(h, out)
	return r.encode(h, out)
}

func betaTypes(apiVersion, kind string) (in, out runtime.Object) {
	switch apiVersion + "/" + kind {
	case "resource.k8s.io/v1beta1/ResourceClaim":
		return &resourcev1beta1.ResourceClaim{}, &resourceapi.ResourceClaim{}
	case "resource.k8s.io/v1beta1/ResourceClaimTemplate":
		return &resourcev1beta1.ResourceClaimTemplate{}, &resourceapi.ResourceClaimTemplate{}
	case "resource.k8s.io/v1beta1/DeviceClass":
		return &resourcev1beta1.DeviceClass{}, &resourceapi.DeviceClass{}
	case "resource.k8s.io/v1beta2/ResourceClaim":
		return &resourcev1beta2.ResourceClaim{}, &resourceapi.ResourceClaim{}
	case "resource.k8s.io/v1beta2/ResourceClaimTemplate":
		return &resourcev1beta2.ResourceClaimTemplate{}, &resourceapi.ResourceClaimTemplate{}
	case "resource.k8s.io/v1beta2/DeviceClass":
		return &resourcev1beta2.DeviceClass{}, &resourceapi.DeviceClass{}
	}
	return nil, nil
}

func convertBeta(in, out runtime.Object) error {
	switch i := in.(type) {
	case *resourcev1beta1.ResourceClaim:
		return drav1beta1.Convert_v1beta1_ResourceClaim_To_v1_ResourceClaim(i, out.(*resourceapi.ResourceClaim), nil)
	case *resourcev1beta1.ResourceClaimTemplate:
		return drav1beta1.Convert_v1beta1_ResourceClaimTemplate_To_v1_ResourceClaimTemplate(i, out.(*resourceapi.ResourceClaimTemplate), nil)
	case *resourcev1beta1.DeviceClass:
		return drav1beta1.Convert_v1beta1_DeviceClass_To_v1_DeviceClass(i, out.(*resourceapi.DeviceClass), nil)
	case *resourcev1beta2.ResourceClaim:
		return drav1beta2.Convert_v1beta2_ResourceClaim_To_v1_ResourceClaim(i, out.(*resourceapi.ResourceClaim), nil)
	case *resourcev1beta2.ResourceClaimTemplate:
		return drav1beta2.Convert_v1beta2_ResourceClaimTemplate_To_v1_ResourceClaimTemplate(i, out.(*resourceapi.ResourceClaimTemplate), nil)
	case *resourcev1beta2.DeviceClass:
		return drav1beta2.Convert_v1beta2_DeviceClass_To_v1_DeviceClass(i, out.(*resourceapi.DeviceClass), nil)
	}
	return fmt.Errorf("unsupported type %T", in)
}

// noteExactly records each request whose fields moved under exactly.
func (r *upgradeRun) noteExactly(h docHead, obj runtime.Object) {
	spec, path := manifest.ClaimSpec(obj)
	if spec == nil {
		return
	}
	for i, req := range spec.Devices.Requests {
		if req.Exactly != nil {
			r.change(finding.SeverityInfo, h.String(), field.NewPath(path, "devices", "requests").Index(i).String(),
				fmt.Sprintf("request %q: deviceClassName, selectors, count and allocationMode moved under exactly", req.Name))
		}
	}
}

// misshapedV1 upgrades a resource.k8s.io/v1 object written in the v1beta1 layout; other v1
// documents are kept.
func (r *upgradeRun) misshapedV1(h docHead, doc []byte) ([]byte, bool) {
	if _, err := manifest.DecodeObject(doc); err == nil {
		return nil, true
	}
	in, out := betaTypes("resource.k8s.io/v1beta1", h.kind)
	if in == nil || yaml.UnmarshalStrict(doc, in) != nil || convertBeta(in, out) != nil {
		return nil, true // not the v1beta1 layout either: lint reports the decode error
	}
	r.changes = append(r.changes, Change{Severity: finding.SeverityError, Rule: finding.RuleMissingExactly, Object: h.String(),
		Message: "written in the v1beta1 layout under apiVersion resource.k8s.io/v1, which the API server rejects (unknown field): requests need exactly or firstAvailable; converted"})
	r.noteExactly(h, out)
	return r.encode(h, out)
}

// encode writes a converted object as a v1 document.
func (r *upgradeRun) encode(h docHead, obj runtime.Object) ([]byte, bool) {
	obj.GetObjectKind().SetGroupVersionKind(resourceapi.SchemeGroupVersion.WithKind(h.kind))
	if m, ok := obj.(metav1.Object); ok {
		m.SetResourceVersion("")
		m.SetUID("")
		m.SetCreationTimestamp(metav1.Time{})
		m.SetManagedFields(nil)
	}
	b, err := yaml.Marshal(stripStatus(obj))
	if err != nil {
		r.fail(h.String(), "", fmt.Sprintf("encode: %v", err))
		return nil, true
	}
	return b, false
}

// stripStatus drops an empty status and the zero creationTimestamp from the encoding.
func stripStatus(obj runtime.Object) any {
	data, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return obj
	}
	if st, ok := data["status"].(map[string]any); ok && len(st) == 0 {
		delete(data, "status")
	}
	if md, ok := data["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
		if t, ok := data["spec"].(map[string]any); ok {
			if tm, ok := t["metadata"].(map[string]any); ok {
				delete(tm, "creationTimestamp")
				if len(tm) == 0 {
					delete(t, "metadata")
				}
			}
		}
	}
	return data
}

func joinDocuments(docs [][]byte) []byte {
	var b bytes.Buffer
	for i, d := range docs {
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(d)
		if len(d) > 0 && d[len(d)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// gpuClass and migClass are the driver's DeviceClass names.
func (u *Upgrader) gpuClass() string  { return selectors.DeviceClasses(u.driver)[0].Name }
func (u *Upgrader) migClass() string  { return selectors.DeviceClasses(u.driver)[1].Name }
func (u *Upgrader) vfioClass() string { return selectors.DeviceClasses(u.driver)[2].Name }
