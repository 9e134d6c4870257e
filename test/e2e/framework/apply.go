package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
)

// FieldManager is the server-side apply field manager of the harness.
const FieldManager = "gpudra-e2e"

// Applier creates or updates objects of any kind with server-side apply, as `kubectl apply
// --server-side` does.
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// NewApplier returns an Applier that acts with cfg's credentials.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// resource returns the client for obj's kind, in namespace ns for namespaced kinds (obj's own
// namespace when it names one).
func (a *Applier) resource(obj *unstructured.Unstructured, ns string) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk, obj.GetName(), err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource), nil
	}
	if obj.GetNamespace() != "" {
		ns = obj.GetNamespace()
	}
	if ns == "" {
		return nil, fmt.Errorf("%s %s: namespaced, but no namespace given", gvk.Kind, obj.GetName())
	}
	return a.dyn.Resource(m.Resource).Namespace(ns), nil
}

// Get reads obj's current state from the API server (namespaced objects without a namespace are
// looked up in ns).
func (a *Applier) Get(ctx context.Context, ns string, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	r, err := a.resource(obj, ns)
	if err != nil {
		return nil, err
	}
	return r.Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// Apply applies objs in order; namespaced objects without a namespace go to ns.
func (a *Applier) Apply(ctx context.Context, ns string, objs ...*unstructured.Unstructured) error {
	for _, obj := range objs {
		r, err := a.resource(obj, ns)
		if err != nil {
			return err
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := r.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// Delete deletes objs (those already gone are skipped) with the given grace period; pods on
// harness nodes never stop on their own, so use 0 for them.
func (a *Applier) Delete(ctx context.Context, ns string, grace int64, objs ...*unstructured.Unstructured) error {
	var errs []error
	for _, obj := range objs {
		r, err := a.resource(obj, ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		err = r.Delete(ctx, obj.GetName(), metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", obj.GetKind(), obj.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// DecodeObjects reads a multi-document YAML or JSON stream into objects, skipping empty
// documents.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode object %d: %w", len(out)+1, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// DryRun has the API server validate obj (admission included) as if it were applied.
func (a *Applier) DryRun(ctx context.Context, ns string, obj *unstructured.Unstructured) error {
	r, err := a.resource(obj, ns)
	if err != nil {
		return err
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = r.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true), DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("dry-run apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}
