package controller

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// ensureTemplate creates want, or puts an existing template of its name back to it: a spec
// that differs in a field the controller sets (a template's spec is immutable) is deleted and
// created again; missing labels or owner references are added. A template in the way that
// another object controls is left alone, with an error.
func (r *Reconciler) ensureTemplate(ctx context.Context, cd *cdv1beta1.ComputeDomain, want *resourcev1.ResourceClaimTemplate) error {
	logger := klog.FromContext(ctx).WithValues("resourceClaimTemplate", klog.KObj(want))
	got := &resourcev1.ResourceClaimTemplate{}
	if created, err := r.getOrCreate(ctx, cd, "ResourceClaimTemplate", want, got); err != nil || created {
		return err
	}
	if err := checkController(got, want, cd); err != nil {
		return err
	}
	if !sameTemplateSpec(&want.Spec, &got.Spec) {
		logger.Info("Replacing a claim template whose spec differs from the domain's", "uid", got.UID)
		if err := r.client.Delete(ctx, got, client.Preconditions{UID: &got.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete ResourceClaimTemplate %s to put it back: %w", klog.KObj(got), err)
		}
		return createObject(ctx, r.client, "ResourceClaimTemplate", want)
	}
	if !putBackMeta(&got.ObjectMeta, &want.ObjectMeta) {
		return nil
	}
	logger.Info("Putting back the claim template's labels and owner")
	if err := r.client.Update(ctx, got); err != nil {
		return fmt.Errorf("update ResourceClaimTemplate %s: %w", klog.KObj(got), err)
	}
	return nil
}

// ensureDaemonSet creates want, or puts an existing DaemonSet of its name back to it (every
// field the controller sets; fields the API server defaults are kept).
func (r *Reconciler) ensureDaemonSet(ctx context.Context, cd *cdv1beta1.ComputeDomain, want *appsv1.DaemonSet) error {
	logger := klog.FromContext(ctx).WithValues("daemonSet", klog.KObj(want))
	got := &appsv1.DaemonSet{}
	if created, err := r.getOrCreate(ctx, cd, "DaemonSet", want, got); err != nil || created {
		return err
	}
	metaChanged := putBackMeta(&got.ObjectMeta, &want.ObjectMeta)
	if !metaChanged && samePodShape(&want.Spec.Template.Spec, &got.Spec.Template.Spec) && equality.Semantic.DeepDerivative(want.Spec, got.Spec) {
		return nil
	}
	logger.Info("Putting back the daemon DaemonSet")
	got.Spec.Selector = want.Spec.Selector
	got.Spec.Template = want.Spec.Template
	if err := r.client.Update(ctx, got); err != nil {
		return fmt.Errorf("update DaemonSet %s: %w", klog.KObj(got), err)
	}
	return nil
}

// getOrCreate reads want's object, of kind, into got, or creates want where there is none and
// says so. The manager's cache holds only the objects that carry NodeLabel (CacheByObject): one
// whose label was removed is missing from it, so creating it fails with AlreadyExists, and it
// is read from the API server (WithUncachedReader) for the caller to put back, if it is cd's:
// cd controls it, or its name is one only cd's objects have (DaemonName). Another object of
// that name, unlabelled and without a controller (a user's template in the way), is left alone
// with an error: without the label or owner, nothing says it is the domain's.
func (r *Reconciler) getOrCreate(ctx context.Context, cd *cdv1beta1.ComputeDomain, kind string, want, got client.Object) (bool, error) {
	key := client.ObjectKeyFromObject(want)
	err := r.client.Get(ctx, key, got)
	switch {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("get %s %s: %w", kind, klog.KObj(want), err)
	}
	klog.FromContext(ctx).V(2).Info("Creating an object of the domain", "kind", kind, "object", klog.KObj(want))
	err = r.client.Create(ctx, want)
	switch {
	case err == nil:
		return true, nil
	case !apierrors.IsAlreadyExists(err):
		return false, fmt.Errorf("create %s %s: %w", kind, klog.KObj(want), err)
	}
	if err := r.reader.Get(ctx, key, got); err != nil {
		return false, fmt.Errorf("get %s %s from the API server (it exists, but not in the cache of labelled objects): %w", kind, klog.KObj(want), err)
	}
	if metav1.GetControllerOfNoCopy(got) == nil && want.GetName() != DaemonName(string(cd.UID)) {
		return false, fmt.Errorf("%s %s, which ComputeDomain %s needs, exists without the domain's label %s and without an owner, so nothing says it is the domain's: delete it or rename spec.channel.resourceClaimTemplate.name",
			kind, klog.KObj(want), klog.KObj(cd), computedomain.NodeLabel)
	}
	return false, nil
}

// createObject creates obj, of kind; one created meanwhile fails it, for the next reconcile
// to check.
func createObject(ctx context.Context, c client.Client, kind string, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil {
		return fmt.Errorf("create %s %s: %w", kind, klog.KObj(obj), err)
	}
	return nil
}

// checkController fails when got, in the place of want, is controlled by another object than
// cd: the controller does not take over another owner's template.
func checkController(got, want metav1.Object, cd *cdv1beta1.ComputeDomain) error {
	ref := metav1.GetControllerOfNoCopy(got)
	if ref == nil || ref.UID == cd.UID {
		return nil
	}
	return fmt.Errorf("%s %s, which ComputeDomain %s needs, is controlled by %s %s (uid %s): delete it or rename spec.channel.resourceClaimTemplate.name",
		"ResourceClaimTemplate", klog.KObj(want), klog.KObj(cd), ref.Kind, ref.Name, ref.UID)
}

// putBackMeta adds want's labels and owner references that got lacks, and says whether it did.
func putBackMeta(got, want *metav1.ObjectMeta) bool {
	changed := false
	for k, v := range want.Labels {
		if got.Labels[k] != v {
			if got.Labels == nil {
				got.Labels = map[string]string{}
			}
			got.Labels[k] = v
			changed = true
		}
	}
	for _, ref := range want.OwnerReferences {
		if !hasOwner(got.OwnerReferences, ref) {
			got.OwnerReferences = append(removeOwner(got.OwnerReferences, ref), ref)
			changed = true
		}
	}
	return changed
}

// hasOwner says whether refs hold ref exactly.
func hasOwner(refs []metav1.OwnerReference, ref metav1.OwnerReference) bool {
	for _, r := range refs {
		if equality.Semantic.DeepEqual(r, ref) {
			return true
		}
	}
	return false
}

// removeOwner is refs without references to ref's owner.
func removeOwner(refs []metav1.OwnerReference, ref metav1.OwnerReference) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for _, r := range refs {
		if r.UID != ref.UID {
			out = append(out, r)
		}
	}
	return out
}

// sameTemplateSpec says whether got holds every field of want, comparing opaque parameters
// as JSON values (the API server may store them re-encoded).
func sameTemplateSpec(want, got *resourcev1.ResourceClaimTemplateSpec) bool {
	w, g := want.DeepCopy(), got.DeepCopy()
	if len(w.Spec.Devices.Config) != len(g.Spec.Devices.Config) {
		return false
	}
	for i := range w.Spec.Devices.Config {
		wo, gO := w.Spec.Devices.Config[i].Opaque, g.Spec.Devices.Config[i].Opaque
		if wo == nil || gO == nil {
			if wo != gO {
				return false
			}
			continue
		}
		if !sameJSON(wo.Parameters.Raw, gO.Parameters.Raw) {
			return false
		}
		wo.Parameters.Raw, gO.Parameters.Raw = nil, nil
	}
	return sameRequestShape(w.Spec.Devices.Requests, g.Spec.Devices.Requests) && equality.Semantic.DeepDerivative(w, g)
}

// sameRequestShape says whether got has as many requests as want, each with as many
// selectors: DeepDerivative would not notice an added one.
func sameRequestShape(want, got []resourcev1.DeviceRequest) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if (want[i].Exactly == nil) != (got[i].Exactly == nil) {
			return false
		}
		if want[i].Exactly != nil && len(want[i].Exactly.Selectors) != len(got[i].Exactly.Selectors) {
			return false
		}
	}
	return true
}

// samePodShape says whether got has as many containers, claims and environment variables as
// want: DeepDerivative would not notice an added one.
func samePodShape(want, got *corev1.PodSpec) bool {
	if len(want.Containers) != len(got.Containers) || len(want.ResourceClaims) != len(got.ResourceClaims) || len(want.NodeSelector) != len(got.NodeSelector) {
		return false
	}
	for i := range want.Containers {
		w, g := &want.Containers[i], &got.Containers[i]
		if len(w.Env) != len(g.Env) || len(w.Resources.Claims) != len(g.Resources.Claims) {
			return false
		}
	}
	return true
}

// sameJSON says whether a and b encode the same JSON value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return equality.Semantic.DeepEqual(va, vb)
}
