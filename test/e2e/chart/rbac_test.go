package chart

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// mpsRole is the chart's Role for MPS daemon pods and the subjects bound to it; nil when the
// chart renders none.
func mpsRole(t *testing.T, objs []*unstructured.Unstructured) (*rbacv1.Role, *rbacv1.RoleBinding) {
	t.Helper()
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	for _, o := range objs {
		switch o.GetKind() {
		case "Role":
			role = &rbacv1.Role{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
				t.Fatal(err)
			}
		case "RoleBinding":
			binding = &rbacv1.RoleBinding{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, binding); err != nil {
				t.Fatal(err)
			}
		}
	}
	return role, binding
}

// TestMPSDaemonPodsRBAC: where MPS daemons run in pods (MPS allowed and mpsDaemonPods, the
// default), the plugin's service account gets exactly create, get and delete on pods of the
// release namespace (a Role, never a ClusterRole), and serve gets --mps-daemon-pods with the
// plugin's image, priority class and the release namespace; otherwise there is no Role and no
// flag.
func TestMPSDaemonPodsRBAC(t *testing.T) {
	for name, tc := range map[string]struct {
		vals map[string]any
		want bool
	}{
		"defaults":          {nil, true},
		"fake-machine":      {map[string]any{"fakeMachine": map[string]any{"name": "l4x8"}}, true},
		"mps-only":          {map[string]any{"sharingStrategies": []any{"MPS"}}, true},
		"daemon-pods-off":   {map[string]any{"mpsDaemonPods": false}, false},
		"no-mps":            {map[string]any{"sharingStrategies": []any{"TimeSlicing"}}, false},
		"exclusive-only":    {map[string]any{"sharingStrategies": []any{}}, false},
		"other-sa-priority": {map[string]any{"serviceAccount": map[string]any{"name": "gpu"}, "priorityClassName": "high"}, true},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, kubeVersion, tc.vals)
			role, binding := mpsRole(t, objs)
			ds := daemonSet(t, objs)
			c := ds.Spec.Template.Spec.Containers[0]
			args := strings.Join(c.Args, " ")
			if !tc.want {
				if role != nil || binding != nil || strings.Contains(args, "--mps-daemon") {
					t.Errorf("MPS daemon pods off: Role %v, RoleBinding %v, args %s", role, binding, args)
				}
				return
			}
			if role == nil || binding == nil {
				t.Fatalf("no Role or RoleBinding for MPS daemon pods")
			}
			want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "delete"}}}
			if diff := cmp.Diff(want, role.Rules); diff != "" || role.Namespace != "gpu-dra-driver" {
				t.Errorf("Role %s/%s rules (-want +got):\n%s", role.Namespace, role.Name, diff)
			}
			sa := ds.Spec.Template.Spec.ServiceAccountName
			if binding.Namespace != "gpu-dra-driver" || binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name ||
				len(binding.Subjects) != 1 || binding.Subjects[0].Name != sa || binding.Subjects[0].Namespace != "gpu-dra-driver" {
				t.Errorf("RoleBinding %+v does not bind Role %s to the plugin's service account %s", binding, role.Name, sa)
			}
			for _, a := range []string{"--mps-daemon-pods", "--mps-daemon-image=" + c.Image, "--mps-daemon-namespace=gpu-dra-driver",
				"--mps-daemon-priority-class=" + ds.Spec.Template.Spec.PriorityClassName} {
				if !slices.Contains(c.Args, a) {
					t.Errorf("args %s: no %s", args, a)
				}
			}
		})
	}
}
