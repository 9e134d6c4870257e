package controller

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpudra/gpudra/computedomain"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// labelNodes keeps the label computedomain.NodeLabel=<cd's UID> on exactly the nodes whose
// channel the scheduler allocated to a claim of cd: the label brings cd's IMEX daemon pod to the
// node (its DaemonSet selects it) as soon as a pod of the job is placed there, before kubelet
// prepares the channel, and takes it away once no claim of cd holds the node's channel. It
// follows the allocations, not the prepares, so that a channel prepare that waits for the
// daemon, fails and is retried never removes the daemon it waits for. A node's channel is one
// claim's at a time, so a node serves at most one domain; a stale label of another domain on a
// node whose channel cd holds is replaced.
func (r *Reconciler) labelNodes(ctx context.Context, cd *cdv1beta1.ComputeDomain) error {
	want, err := r.allocatedNodes(ctx, cd)
	if err != nil {
		return err
	}
	uid := string(cd.UID)
	var labelled corev1.NodeList
	if err := r.client.List(ctx, &labelled, client.MatchingLabels(domainLabels(uid))); err != nil {
		return fmt.Errorf("list the nodes labelled %s=%s: %w", computedomain.NodeLabel, uid, err)
	}
	for i := range labelled.Items {
		if n := &labelled.Items[i]; !want[n.Name] {
			if err := r.setNodeLabel(ctx, n, ""); err != nil {
				return err
			}
		}
	}
	for name := range want {
		n := &corev1.Node{}
		if err := r.client.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			if apierrors.IsNotFound(err) {
				continue // the pool of a node that is gone
			}
			return fmt.Errorf("get node %s to label it: %w", name, err)
		}
		if n.Labels[computedomain.NodeLabel] != uid {
			if err := r.setNodeLabel(ctx, n, uid); err != nil {
				return err
			}
		}
	}
	return nil
}

// setNodeLabel sets computedomain.NodeLabel on n to uid, or removes it when uid is "", with
// the resource version read (a concurrent change is a conflict, retried by the next event).
func (r *Reconciler) setNodeLabel(ctx context.Context, n *corev1.Node, uid string) error {
	patch := client.MergeFromWithOptions(n.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if uid == "" {
		delete(n.Labels, computedomain.NodeLabel)
	} else {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[computedomain.NodeLabel] = uid
	}
	if err := r.client.Patch(ctx, n, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set label %s=%q on node %s: %w", computedomain.NodeLabel, uid, n.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Set the node's domain label", "node", n.Name, "domainUID", uid)
	return nil
}

// allocatedNodes are the nodes (pools) whose channel device is allocated to a claim of cd: a
// claim in cd's namespace whose opaque config for the driver is a ComputeDomainChannelConfig
// naming cd (as the claims of its channel template do).
func (r *Reconciler) allocatedNodes(ctx context.Context, cd *cdv1beta1.ComputeDomain) (map[string]bool, error) {
	var claims resourcev1.ResourceClaimList
	if err := r.client.List(ctx, &claims, client.InNamespace(cd.Namespace)); err != nil {
		return nil, fmt.Errorf("list the ResourceClaims of namespace %s: %w", cd.Namespace, err)
	}
	nodes := map[string]bool{}
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Status.Allocation == nil || channelDomain(c) != cd.UID {
			continue
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver == computedomain.DriverName {
				nodes[res.Pool] = true
			}
		}
	}
	return nodes, nil
}

// channelDomain is the UID of the domain a channel claim's ComputeDomainChannelConfig names, ""
// for any other claim. The node plugin decodes the config strictly when it prepares the
// channel; here a config that does not decode names no domain.
func channelDomain(c *resourcev1.ResourceClaim) types.UID {
	for _, cfg := range c.Spec.Devices.Config {
		if cfg.Opaque == nil || cfg.Opaque.Driver != computedomain.DriverName {
			continue
		}
		var cc cdv1beta1.ComputeDomainChannelConfig
		if json.Unmarshal(cfg.Opaque.Parameters.Raw, &cc) == nil && cc.Kind == cdv1beta1.ChannelConfigKind && cc.DomainID != "" {
			return types.UID(cc.DomainID)
		}
	}
	return ""
}

// domainOfClaim maps a channel claim to its domain (in the claim's namespace).
func (r *Reconciler) domainOfClaim(ctx context.Context, obj client.Object) []reconcile.Request {
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return nil
	}
	uid := channelDomain(c)
	if uid == "" {
		return nil
	}
	return r.domainsWhere(ctx, func(cd *cdv1beta1.ComputeDomain) bool { return cd.UID == uid && cd.Namespace == c.Namespace })
}
