package chart

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func clusterRole(t *testing.T, objs []*unstructured.Unstructured) *rbacv1.ClusterRole {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" {
			cr := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cr); err != nil {
				t.Fatal(err)
			}
			return cr
		}
	}
	t.Fatal("the chart renders no ClusterRole")
	return nil
}

// grants says whether the role has verb on resource in resource.k8s.io.
func grants(cr *rbacv1.ClusterRole, resource, verb string) bool {
	for _, r := range cr.Rules {
		if slices.Contains(r.APIGroups, "resource.k8s.io") && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// TestClaimStatusRBAC: patch on resourceclaims/status is granted by default only where the API
// server authorizes claim status per driver and node (1.36+); on 1.34-1.35 only when
// rbac.claimStatus is true, and never when it is false. The associated-node rule goes with it.
func TestClaimStatusRBAC(t *testing.T) {
	for _, tc := range []struct {
		kube  string
		value any // nil: the default
		want  bool
	}{
		{kubeVersion, nil, true},
		{"v1.36.0", nil, true},
		{oldKubeVersion, nil, false},
		{"v1.34.1", nil, false},
		{oldKubeVersion, true, true},
		{oldKubeVersion, "auto", false},
		{kubeVersion, false, false},
		{kubeVersion, "auto", true},
	} {
		var vals map[string]any
		if tc.value != nil {
			vals = map[string]any{"rbac": map[string]any{"claimStatus": tc.value}}
		}
		cr := clusterRole(t, render(t, tc.kube, vals))
		if got := grants(cr, "resourceclaims/status", "patch"); got != tc.want {
			t.Errorf("Kubernetes %s, rbac.claimStatus=%v: grants patch on resourceclaims/status: %v, want %v", tc.kube, tc.value, got, tc.want)
		}
		if got := grants(cr, "resourceclaims/driver", "associated-node:patch"); got != tc.want {
			t.Errorf("Kubernetes %s, rbac.claimStatus=%v: grants associated-node:patch on resourceclaims/driver: %v, want %v", tc.kube, tc.value, got, tc.want)
		}
		// Everything else stays.
		if !grants(cr, "resourceclaims", "get") || !grants(cr, "resourceslices", "create") {
			t.Errorf("Kubernetes %s, rbac.claimStatus=%v: the role lost other rules: %+v", tc.kube, tc.value, cr.Rules)
		}
	}
}
