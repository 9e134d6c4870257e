package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// updateStatus writes the part of cd's status the controller owns: entries of nodes that left
// pruned, each entry's index, and Ready or NotReady.
func (r *Reconciler) updateStatus(ctx context.Context, cd *cdv1beta1.ComputeDomain) error {
	nodes, err := r.nodeNames(ctx)
	if err != nil {
		return err
	}
	daemons, err := r.daemonNodes(ctx, cd)
	if err != nil {
		return err
	}
	return r.writeStatus(ctx, cd, func(st *cdv1beta1.ComputeDomainStatus) {
		st.Nodes = pruneNodes(st.Nodes, func(name string) bool { return nodes.Has(name) && daemons.Has(name) })
		assignIndexes(st.Nodes)
		st.Status = cdv1beta1.StatusNotReady
		if domainReady(cd.Spec.NumNodes, st.CliqueID, st.Nodes) {
			st.Status = cdv1beta1.StatusReady
		}
	})
}

// writeStatus applies change to a copy of cd's status and, when that changes it, writes it to
// the status subresource (failing on a concurrent change: the next reconcile starts over) and
// into cd.
func (r *Reconciler) writeStatus(ctx context.Context, cd *cdv1beta1.ComputeDomain, change func(*cdv1beta1.ComputeDomainStatus)) error {
	updated := cd.DeepCopy()
	change(&updated.Status)
	if equality.Semantic.DeepEqual(updated.Status, cd.Status) {
		return nil
	}
	if err := r.client.Status().Update(ctx, updated); err != nil {
		return fmt.Errorf("update the status of ComputeDomain %s: %w", klog.KObj(cd), err)
	}
	klog.FromContext(ctx).V(2).Info("Updated the domain's status", "status", updated.Status.Status, "cliqueID", updated.Status.CliqueID, "nodes", len(updated.Status.Nodes))
	*cd = *updated
	return nil
}

// nodeNames are the names of the cluster's Nodes.
func (r *Reconciler) nodeNames(ctx context.Context) (sets.Set[string], error) {
	var list corev1.NodeList
	if err := r.client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	names := sets.New[string]()
	for _, n := range list.Items {
		names.Insert(n.Name)
	}
	return names, nil
}

// daemonNodes are the nodes that run a pod of cd's daemon DaemonSet that has not finished.
func (r *Reconciler) daemonNodes(ctx context.Context, cd *cdv1beta1.ComputeDomain) (sets.Set[string], error) {
	var list corev1.PodList
	if err := r.client.List(ctx, &list, client.InNamespace(r.namespace), client.MatchingLabels(domainLabels(string(cd.UID)))); err != nil {
		return nil, fmt.Errorf("list the daemon pods of ComputeDomain %s in namespace %s: %w", klog.KObj(cd), r.namespace, err)
	}
	names := sets.New[string]()
	for _, p := range list.Items {
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			names.Insert(p.Spec.NodeName)
		}
	}
	return names, nil
}

// readCliqueWorld reads what the clique choice needs.
func (r *Reconciler) readCliqueWorld(ctx context.Context) (*cliqueWorld, error) {
	var (
		sliceList resourcev1.ResourceSliceList
		nodes     corev1.NodeList
		domains   cdv1beta1.ComputeDomainList
	)
	if err := r.client.List(ctx, &sliceList); err != nil {
		return nil, fmt.Errorf("list ResourceSlices of %s: %w", computedomain.DriverName, err)
	}
	if err := r.client.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	if err := r.client.List(ctx, &domains); err != nil {
		return nil, fmt.Errorf("list ComputeDomains: %w", err)
	}
	r.pins.fill(domains.Items)
	return &cliqueWorld{Slices: sliceList.Items, Nodes: nodes.Items, Domains: domains.Items}, nil
}

// pruneNodes is entries without those of nodes that left (keep says false).
func pruneNodes(entries []cdv1beta1.ComputeDomainNode, keep func(node string) bool) []cdv1beta1.ComputeDomainNode {
	var out []cdv1beta1.ComputeDomainNode
	for _, e := range entries {
		if keep(e.Name) {
			out = append(out, e)
		}
	}
	return out
}

// assignIndexes sets each entry's index: its position among the entries of its clique,
// sorted by node name.
func assignIndexes(entries []cdv1beta1.ComputeDomainNode) {
	order := make([]*cdv1beta1.ComputeDomainNode, len(entries))
	for i := range entries {
		order[i] = &entries[i]
	}
	slices.SortFunc(order, func(a, b *cdv1beta1.ComputeDomainNode) int {
		return cmp.Or(cmp.Compare(a.CliqueID, b.CliqueID), cmp.Compare(a.Name, b.Name))
	})
	for i, e := range order {
		if i > 0 && order[i-1].CliqueID == e.CliqueID {
			e.Index = order[i-1].Index + 1
		} else {
			e.Index = 0
		}
	}
}

// domainReady is the Ready rule: with numNodes > 0, at least numNodes entries Ready in the
// domain's clique; with numNodes 0, at least one entry and every entry Ready.
func domainReady(numNodes int, clique string, entries []cdv1beta1.ComputeDomainNode) bool {
	ready := 0
	for _, e := range entries {
		if e.Status == cdv1beta1.StatusReady && (numNodes == 0 || e.CliqueID == clique) {
			ready++
		}
	}
	if numNodes > 0 {
		return ready >= numNodes
	}
	return len(entries) > 0 && ready == len(entries)
}
