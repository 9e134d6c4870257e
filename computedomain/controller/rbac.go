package controller

import (
	rbacv1 "k8s.io/api/rbac/v1"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// Rules are the least a ClusterRole must grant the controller (channel templates live in every
// domain's namespace, and nodes are cluster-scoped). Each rule says why it is needed. Every
// read goes through the manager's cache, which lists and watches: no rule grants get.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		// Reconciles domains; adds and removes its finalizer with a patch.
		{APIGroups: []string{cdv1beta1.GroupName}, Resources: []string{"computedomains"}, Verbs: []string{"list", "watch", "patch"}},
		// Writes the clique, the node indexes, the pruned nodes and Ready.
		{APIGroups: []string{cdv1beta1.GroupName}, Resources: []string{"computedomains/status"}, Verbs: []string{"update"}},
		// Sets blockOwnerDeletion in the channel template's owner reference to its domain
		// (the OwnerReferencesPermissionEnforcement admission plugin asks for this).
		{APIGroups: []string{cdv1beta1.GroupName}, Resources: []string{"computedomains/finalizers"}, Verbs: []string{"update"}},
		// Makes, puts back (metadata: update; spec, immutable: delete and create) and removes
		// the channel and daemon claim templates; reads one whose label was removed (so not
		// in the cache) from the API server to put it back.
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaimtemplates"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		// Reads the cliques of the nodes from the driver's published channel devices.
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list", "watch"}},
		// Makes, puts back and removes the daemon DaemonSets; reads one whose label was removed
		// from the API server to put it back.
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		// Finds the nodes that run a daemon pod of a domain (pruning).
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		// Finds the nodes whose channel a claim of a domain holds (node labels).
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"list", "watch"}},
		// Finds nodes that are gone (pruning) or serve a domain (clique choice), labels the
		// nodes whose channel a domain's claim holds and removes the label from the others.
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch", "patch"}},
		// Reports NoClique on a domain (events.k8s.io/v1; the recorder patches a repeated event).
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}
