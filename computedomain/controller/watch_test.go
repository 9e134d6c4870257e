package controller

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// names are the domain names of reqs.
func names(reqs []reconcile.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Name)
	}
	return out
}

// TestWatchMaps: events on the objects the controller watches reach the right domains.
func TestWatchMaps(t *testing.T) {
	e := newEnv(t, nil,
		withStatus(newDomain("labelled", "uid-1", 1, ""), cliqueA),
		withStatus(newDomain("listing", "uid-2", 1, ""), cliqueA, entry("n7", cliqueA, "Ready")),
		newDomain("waiting", "uid-3", 1, ""),
		withStatus(newDomain("unrelated", "uid-4", 1, ""), cliqueB))
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: DaemonName("uid-1"), Namespace: driverNS, Labels: map[string]string{domainLabel: "uid-1"}}}
	tests := []struct {
		name string
		got  []reconcile.Request
		want []string
	}{
		{"a DaemonSet maps to its domain", e.ctrl.domainOfLabel(e.ctx, ds), []string{"labelled"}},
		{"a pod of an unknown domain maps to none", e.ctrl.domainOfLabel(e.ctx, daemonPod("uid-gone", "n1", "Running")), nil},
		{"a labelled node maps to its domain and the waiting ones", e.ctrl.domainsOfNode(e.ctx, newNode("n1", domainLabel, "uid-1")), []string{"labelled", "waiting"}},
		{"a listed node maps to the listing domain and the waiting ones", e.ctrl.domainsOfNode(e.ctx, newNode("n7")), []string{"listing", "waiting"}},
		{"a slice maps to the waiting domains", e.ctrl.waitingDomains(e.ctx, newSlice("n1", cliqueA)), []string{"waiting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, names(tt.got)); diff != "" {
				t.Errorf("domains (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSetupWithManager: the controller registers with a manager whose cache CacheByObject
// restricts (no API server is asked before the manager starts).
func TestSetupWithManager(t *testing.T) {
	e := newEnv(t, nil)
	byObject, err := CacheByObject(driverNS)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme: e.client.Scheme(),
		Cache:  cache.Options{ByObject: byObject},
		// The restricted cache asks which kinds are namespaced.
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return staticMapper(), nil },
		Metrics:        metricsserver.Options{BindAddress: "0"},
		// Controller names are unique per process; go test -count=2 sets up twice.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ctrl.SetupWithManager(mgr); err != nil {
		t.Errorf("SetupWithManager: %v", err)
	}
}

// staticMapper knows the scopes of the kinds the controller caches.
func staticMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("Pod"),
		appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
		resourcev1.SchemeGroupVersion.WithKind("ResourceClaimTemplate"),
		cdv1beta1.GroupVersion().WithKind(cdv1beta1.Kind),
	} {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	m.Add(resourcev1.SchemeGroupVersion.WithKind("ResourceSlice"), meta.RESTScopeRoot)
	return m
}
