package imextest

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

// Scheme returns a scheme with client-go's types and the ComputeDomain API.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1beta1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewClientBuilder returns a controller-runtime fake client builder for ComputeDomains: the
// Scheme, a status subresource, and server-side apply that merges status.nodes by name, as
// the CRD's x-kubernetes-list-type: map does (the fake's default converter would treat the
// list as one atomic value, so one node's apply would replace every other node's entry).
//
// Limits, as for any controller-runtime fake client: no CRD validation (required fields,
// enums, defaults), no admission, and each apply is made typed first, so it owns the zero
// values of the entry's fields it did not send (see the package doc).
func NewClientBuilder() (*fake.ClientBuilder, error) {
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	cd, err := newDomainConverter()
	if err != nil {
		return nil, err
	}
	return fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&v1beta1.ComputeDomain{}).
		WithTypeConverters(cd, managedfields.NewDeducedTypeConverter()), nil
}

// domainSchema is the ComputeDomain's structure as structured-merge-diff needs it: the
// status's nodes are an associative list keyed by name; everything else is deduced.
const domainSchema = `types:
- name: computedomain
  map:
    fields:
    - name: apiVersion
      type: {scalar: string}
    - name: kind
      type: {scalar: string}
    - name: metadata
      type: {namedType: __untyped_deduced_}
    - name: spec
      type: {namedType: __untyped_deduced_}
    - name: status
      type: {namedType: status}
- name: status
  map:
    fields:
    - name: status
      type: {scalar: string}
    - name: cliqueID
      type: {scalar: string}
    - name: nodes
      type:
        list:
          elementType: {namedType: node}
          elementRelationship: associative
          keys: [name]
- name: node
  map:
    fields:
    - name: name
      type: {scalar: string}
    - name: ipAddress
      type: {scalar: string}
    - name: cliqueID
      type: {scalar: string}
    - name: index
      type: {scalar: numeric}
    - name: status
      type: {scalar: string}
- name: __untyped_atomic_
  scalar: untyped
  list:
    elementType: {namedType: __untyped_atomic_}
    elementRelationship: atomic
  map:
    elementType: {namedType: __untyped_atomic_}
    elementRelationship: atomic
- name: __untyped_deduced_
  scalar: untyped
  list:
    elementType: {namedType: __untyped_atomic_}
    elementRelationship: atomic
  map:
    elementType: {namedType: __untyped_deduced_}
    elementRelationship: separable
`

// domainConverter converts ComputeDomains, and nothing else, for the fake client's apply.
type domainConverter struct {
	typ typed.ParseableType
}

var _ managedfields.TypeConverter = domainConverter{}

func newDomainConverter() (domainConverter, error) {
	p, err := typed.NewParser(typed.YAMLObject(domainSchema))
	if err != nil {
		return domainConverter{}, fmt.Errorf("ComputeDomain apply schema: %w", err)
	}
	return domainConverter{typ: p.Type("computedomain")}, nil
}

// ObjectToTyped implements managedfields.TypeConverter.
func (c domainConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	if !isDomain(u) {
		return nil, errors.New("not a ComputeDomain") // the fake client tries its next converter
	}
	return c.typ.FromUnstructured(u, opts...)
}

// TypedToObject implements managedfields.TypeConverter.
func (c domainConverter) TypedToObject(v *typed.TypedValue) (runtime.Object, error) {
	u, ok := v.AsValue().Unstructured().(map[string]any)
	if !ok || !isDomain(u) {
		return nil, errors.New("not a ComputeDomain") // the fake client tries its next converter
	}
	return &unstructured.Unstructured{Object: u}, nil
}

// isDomain reports whether an object's apiVersion and kind are the ComputeDomain's.
func isDomain(u map[string]any) bool {
	return u["apiVersion"] == v1beta1.GroupVersion().String() && u["kind"] == v1beta1.Kind
}
