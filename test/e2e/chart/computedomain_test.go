package chart

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// computeDomainPods returns the pod specs of the ComputeDomain controller's Deployment and the
// ComputeDomain plugin's DaemonSet.
func computeDomainPods(t *testing.T, objs []*unstructured.Unstructured) (controller, plugin *corev1.PodSpec) {
	t.Helper()
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
				t.Fatal(err)
			}
			if d.Spec.Template.Labels["app.kubernetes.io/component"] == "compute-domain-controller" {
				controller = &d.Spec.Template.Spec
			}
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
				t.Fatal(err)
			}
			if ds.Spec.Template.Labels["app.kubernetes.io/component"] == "compute-domain-plugin" {
				plugin = &ds.Spec.Template.Spec
			}
		}
	}
	if controller == nil || plugin == nil {
		t.Fatalf("no ComputeDomain controller Deployment (%v) or plugin DaemonSet (%v)", controller != nil, plugin != nil)
	}
	return controller, plugin
}

// TestComputeDomainPluginRunsAsRoot: the ComputeDomain plugin runs as root, not as the image's
// user: it creates its socket, checkpoint and the IMEX daemons' directories in root-owned host
// directories (as the image's user it exited "create lock directory: permission denied" on the
// node tier).
func TestComputeDomainPluginRunsAsRoot(t *testing.T) {
	_, plugin := computeDomainPods(t, render(t, kubeVersion, map[string]any{"computeDomains": map[string]any{"enabled": true}}))
	sc := plugin.Containers[0].SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("ComputeDomain plugin container securityContext %+v, want runAsUser 0", sc)
	}
}
