package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/gpudra/gpudra/computedomain"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// addFinalizer adds Finalizer to cd unless it has it.
func (r *Reconciler) addFinalizer(ctx context.Context, cd *cdv1beta1.ComputeDomain) error {
	if controllerutil.ContainsFinalizer(cd, Finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(cd.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(cd, Finalizer)
	if err := r.client.Patch(ctx, cd, patch); err != nil {
		return fmt.Errorf("add finalizer %s to ComputeDomain %s: %w", Finalizer, klog.KObj(cd), err)
	}
	return nil
}

// cleanup removes what the controller made for cd, which is being deleted: its DaemonSet, its
// daemon and channel claim templates and its node labels; then it drops the finalizer. A step
// that fails leaves the finalizer for the next reconcile.
func (r *Reconciler) cleanup(ctx context.Context, cd *cdv1beta1.ComputeDomain) error {
	if !controllerutil.ContainsFinalizer(cd, Finalizer) {
		return nil
	}
	uid := string(cd.UID)
	daemon := metav1.ObjectMeta{Name: DaemonName(uid), Namespace: r.namespace}
	if err := r.deleteOwned(ctx, "DaemonSet", &appsv1.DaemonSet{ObjectMeta: daemon}, uid); err != nil {
		return err
	}
	if err := r.deleteOwned(ctx, "ResourceClaimTemplate", &resourcev1.ResourceClaimTemplate{ObjectMeta: daemon}, uid); err != nil {
		return err
	}
	if cd.Spec.Channel != nil {
		channel := metav1.ObjectMeta{Name: cd.Spec.Channel.ResourceClaimTemplate.Name, Namespace: cd.Namespace}
		if err := r.deleteOwned(ctx, "ResourceClaimTemplate", &resourcev1.ResourceClaimTemplate{ObjectMeta: channel}, uid); err != nil {
			return err
		}
	}
	if err := r.unlabelNodes(ctx, uid); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(cd.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(cd, Finalizer)
	err := r.client.Patch(ctx, cd, patch)
	switch {
	case apierrors.IsNotFound(err):
		// An earlier reconcile, from a cache that had not yet seen the finalizer go, removed it:
		// the domain is gone, and so is everything above.
	case err != nil:
		return fmt.Errorf("remove finalizer %s from ComputeDomain %s: %w", Finalizer, klog.KObj(cd), err)
	}
	r.pins.remove(cd.UID)
	klog.FromContext(ctx).Info("Removed the domain's daemons, templates and node labels")
	return nil
}

// deleteOwned deletes obj if it exists and carries the label of the domain with uid: an
// object of that name that the controller did not make for the domain stays.
func (r *Reconciler) deleteOwned(ctx context.Context, kind string, obj client.Object, uid string) error {
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get %s %s to delete it: %w", kind, klog.KObj(obj), err)
	}
	if obj.GetLabels()[computedomain.NodeLabel] != uid {
		klog.FromContext(ctx).Info("Leaving an object of the domain's names that was not made for it", "object", klog.KObj(obj), "kind", kind)
		return nil
	}
	uidPrecondition := obj.GetUID()
	if err := r.client.Delete(ctx, obj, client.Preconditions{UID: &uidPrecondition}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s %s: %w", kind, klog.KObj(obj), err)
	}
	return nil
}

// unlabelNodes removes NodeLabel from every node whose label names the domain with uid.
func (r *Reconciler) unlabelNodes(ctx context.Context, uid string) error {
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes, client.MatchingLabels(domainLabels(uid))); err != nil {
		return fmt.Errorf("list the nodes labelled %s=%s: %w", computedomain.NodeLabel, uid, err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		patch := client.MergeFromWithOptions(n.DeepCopy(), client.MergeFromWithOptimisticLock{})
		delete(n.Labels, computedomain.NodeLabel)
		if err := r.client.Patch(ctx, n, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove label %s=%s from node %s: %w", computedomain.NodeLabel, uid, n.Name, err)
		}
	}
	return nil
}
