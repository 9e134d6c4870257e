package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpudra/gpudra/computedomain"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// AddToScheme registers in s what the controller reads and writes: client-go's types and the
// ComputeDomain API.
func AddToScheme(s *runtime.Scheme) error {
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return fmt.Errorf("register client-go's types: %w", err)
	}
	if err := cdv1beta1.AddToScheme(s); err != nil {
		return fmt.Errorf("register %s: %w", cdv1beta1.GroupVersion(), err)
	}
	return nil
}

// SetupWithManager registers the controller with mgr. It reconciles a domain when the domain
// changes; when its DaemonSet, daemon pods or claim templates change (found by their NodeLabel
// label); when a node it labelled or lists changes or goes; when a claim of its channel template
// is allocated or released (node labels); and, while it waits for a clique, when a node's labels
// or the driver's ResourceSlices change.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	labelled := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[computedomain.NodeLabel] != ""
	}))
	ofDriver := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
		s, ok := o.(*resourcev1.ResourceSlice)
		return ok && s.Spec.Driver == computedomain.DriverName
	}))
	err := ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&cdv1beta1.ComputeDomain{}).
		Watches(&appsv1.DaemonSet{}, handler.EnqueueRequestsFromMapFunc(r.domainOfLabel), labelled).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.domainOfLabel), labelled).
		Watches(&resourcev1.ResourceClaimTemplate{}, handler.EnqueueRequestsFromMapFunc(r.domainOfLabel), labelled).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.domainsOfNode), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&resourcev1.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(r.waitingDomains), ofDriver).
		Watches(&resourcev1.ResourceClaim{}, handler.EnqueueRequestsFromMapFunc(r.domainOfClaim)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up the %s: %w", Name, err)
	}
	return nil
}

// domainOfLabel maps an object the controller made to its domain, named by its NodeLabel.
func (r *Reconciler) domainOfLabel(ctx context.Context, obj client.Object) []reconcile.Request {
	uid := obj.GetLabels()[computedomain.NodeLabel]
	return r.domainsWhere(ctx, func(cd *cdv1beta1.ComputeDomain) bool { return string(cd.UID) == uid })
}

// domainsOfNode maps a node to the domains its label names or whose status lists it, and to
// the domains that wait for a clique (its labels decide which nodes are free).
func (r *Reconciler) domainsOfNode(ctx context.Context, obj client.Object) []reconcile.Request {
	uid := obj.GetLabels()[computedomain.NodeLabel]
	return r.domainsWhere(ctx, func(cd *cdv1beta1.ComputeDomain) bool {
		if string(cd.UID) == uid || cd.Status.CliqueID == "" {
			return true
		}
		for _, n := range cd.Status.Nodes {
			if n.Name == obj.GetName() {
				return true
			}
		}
		return false
	})
}

// waitingDomains maps a change of the driver's slices to the domains that wait for a clique.
func (r *Reconciler) waitingDomains(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.domainsWhere(ctx, func(cd *cdv1beta1.ComputeDomain) bool { return cd.Status.CliqueID == "" })
}

// domainsWhere are the requests of the domains match accepts.
func (r *Reconciler) domainsWhere(ctx context.Context, match func(*cdv1beta1.ComputeDomain) bool) []reconcile.Request {
	var list cdv1beta1.ComputeDomainList
	if err := r.client.List(ctx, &list); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot list ComputeDomains to map an event to them")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if match(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}
