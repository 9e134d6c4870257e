package nodeplugin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpudra/gpudra/computedomain/nodeplugin"
)

// TestClientDomains: a domain is found by UID in the claim's namespace only; a missing one is
// ErrDomainNotFound, and an API error says what was listed.
func TestClientDomains(t *testing.T) {
	scheme, err := nodeplugin.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	a := domain("a", domainUID, "c.1", 0, "", nil)
	b := domain("b", otherUID, "c.1", 0, "", nil)
	b.Namespace = "team-b"
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(a, b).Build()
	for _, tc := range []struct {
		namespace string
		uid       types.UID
		want      string // the domain's name, "" for not found
	}{
		{"default", domainUID, "a"},
		{"team-b", otherUID, "b"},
		{"default", otherUID, ""},
		{"team-b", domainUID, ""},
	} {
		got, err := nodeplugin.NewClientDomains(c).Domain(t.Context(), tc.namespace, tc.uid)
		switch {
		case tc.want == "" && !errors.Is(err, nodeplugin.ErrDomainNotFound):
			t.Errorf("Domain(%s, %s): %v, %v; want ErrDomainNotFound", tc.namespace, tc.uid, got, err)
		case tc.want != "" && (err != nil || got.Name != tc.want):
			t.Errorf("Domain(%s, %s): %v, %v; want %s", tc.namespace, tc.uid, got, err, tc.want)
		}
	}
	failing := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("connection refused")
		}}).Build()
	if _, err := nodeplugin.NewClientDomains(failing).Domain(t.Context(), "default", domainUID); err == nil ||
		!strings.Contains(err.Error(), "list ComputeDomains in namespace default: connection refused") || errors.Is(err, nodeplugin.ErrDomainNotFound) {
		t.Errorf("Domain with a failing API server: %v", err)
	}
}
