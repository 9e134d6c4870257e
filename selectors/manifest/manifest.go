package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/input"
)

// Object is one object of a manifest.
type Object struct {
	// Document is the index of the YAML document the object came from.
	Document int
	// Object is *resourceapi.ResourceClaim, *resourceapi.ResourceClaimTemplate,
	// *resourceapi.DeviceClass, *corev1.Pod, *appsv1.Deployment, *appsv1.StatefulSet or *batchv1.Job; any other kind
	// is nil (see Kind).
	Object runtime.Object
	// APIVersion, Kind, Namespace and Name identify the object.
	APIVersion, Kind, Namespace, Name string
}

// String is "Kind namespace/name" ("Kind name" for cluster-scoped objects and objects without a
// namespace).
func (o Object) String() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// Decode decodes the objects of a multi-document manifest: ResourceClaims,
// ResourceClaimTemplates and DeviceClasses of resource.k8s.io/v1, Pods, Deployments, StatefulSets and Jobs
// strictly (unknown fields are errors), other kinds with a nil Object. The error joins a
// *DecodeError for every object that does not decode; the others are returned.
func Decode(data []byte) ([]Object, error) {
	docs, err := SplitDocuments(data)
	if err != nil {
		return nil, err
	}
	var objs []Object
	var errs []error
	for i, d := range docs {
		tm, om, err := Meta(d)
		if err != nil {
			errs = append(errs, &DecodeError{Object: fmt.Sprintf("document %d", i), Err: err})
			continue
		}
		if tm.Kind == "" {
			continue
		}
		o := Object{Document: i, APIVersion: tm.APIVersion, Kind: tm.Kind, Namespace: om.Namespace, Name: om.Name}
		obj, err := DecodeObject(d)
		if err != nil {
			errs = append(errs, &DecodeError{Object: o.String(), Err: fmt.Errorf("does not decode as %s %s: %w", tm.APIVersion, tm.Kind, err)})
			continue
		}
		o.Object = obj
		objs = append(objs, o)
	}
	return objs, errors.Join(errs...)
}

// DecodeError is an object of a manifest that does not decode.
type DecodeError struct {
	// Object names the document ("document 2", or the object when its kind and name read).
	Object string
	// Err is the decoding error.
	Err error
}

// Error implements error.
func (e *DecodeError) Error() string { return e.Object + ": " + e.Err.Error() }

// Unwrap returns the decoding error.
func (e *DecodeError) Unwrap() error { return e.Err }

// SplitDocuments splits a multi-document YAML stream; documents that hold only comments or
// whitespace are kept (as empty) so that indices match the source.
func SplitDocuments(data []byte) ([][]byte, error) {
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", len(docs), err)
		}
		docs = append(docs, doc)
	}
}

// Meta reads apiVersion, kind and metadata of a document.
func Meta(doc []byte) (metav1.TypeMeta, metav1.ObjectMeta, error) {
	var head struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
	}
	err := yaml.Unmarshal(doc, &head)
	return head.TypeMeta, head.Metadata, err
}

// DecodeObject decodes a document of a kind the package knows in its current version, strictly
// (unknown fields are errors). Other kinds and versions give a nil object and no error.
func DecodeObject(doc []byte) (runtime.Object, error) {
	tm, _, err := Meta(doc)
	if err != nil {
		return nil, err
	}
	var obj runtime.Object
	switch tm.APIVersion + "/" + tm.Kind {
	case "resource.k8s.io/v1/ResourceClaim":
		obj = &resourceapi.ResourceClaim{}
	case "resource.k8s.io/v1/ResourceClaimTemplate":
		obj = &resourceapi.ResourceClaimTemplate{}
	case "resource.k8s.io/v1/DeviceClass":
		obj = &resourceapi.DeviceClass{}
	case "v1/Pod":
		obj = &corev1.Pod{}
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "apps/v1/StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "batch/v1/Job":
		obj = &batchv1.Job{}
	default:
		return nil, nil
	}
	if err := input.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// PodSpec returns the pod spec of a Pod, Deployment, StatefulSet or Job, and how many pods use it.
func PodSpec(obj runtime.Object) (*corev1.PodSpec, int) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &o.Spec, 1
	case *appsv1.Deployment:
		n := 1
		if o.Spec.Replicas != nil {
			n = int(*o.Spec.Replicas)
		}
		return &o.Spec.Template.Spec, n
	case *appsv1.StatefulSet:
		n := 1
		if o.Spec.Replicas != nil {
			n = int(*o.Spec.Replicas)
		}
		return &o.Spec.Template.Spec, n
	case *batchv1.Job:
		n := 1
		if o.Spec.Parallelism != nil {
			n = int(*o.Spec.Parallelism)
		}
		return &o.Spec.Template.Spec, n
	}
	return nil, 0
}

// ClaimSpec returns the claim spec of a ResourceClaim or ResourceClaimTemplate and the field
// path to it.
func ClaimSpec(obj runtime.Object) (*resourceapi.ResourceClaimSpec, string) {
	switch o := obj.(type) {
	case *resourceapi.ResourceClaim:
		return &o.Spec, "spec"
	case *resourceapi.ResourceClaimTemplate:
		return &o.Spec.Spec, "spec.spec"
	}
	return nil, ""
}
