package nodeplugin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
)

func nodeClient(t *testing.T, labels map[string]string, funcs interceptor.Funcs) client.Client {
	t.Helper()
	scheme, err := nodeplugin.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(funcs).
		WithObjects(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels}}).Build()
}

func nodeLabels(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	var n corev1.Node
	if err := c.Get(t.Context(), client.ObjectKey{Name: "n1"}, &n); err != nil {
		t.Fatal(err)
	}
	return n.Labels
}

// TestClientNodeLabeler: Label adds the domain's label (keeping the node's others), accepts its
// own, refuses another domain's; Unlabel removes only the domain's own.
func TestClientNodeLabeler(t *testing.T) {
	other := map[string]string{"zone": "a"}
	with := func(v string) map[string]string { return map[string]string{"zone": "a", computedomain.NodeLabel: v} }
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		unlabel bool
		want    map[string]string
		wantErr error
	}{
		{name: "label", labels: other, want: with(string(domainUID))},
		{name: "label a node without labels", labels: nil, want: map[string]string{computedomain.NodeLabel: string(domainUID)}},
		{name: "label again", labels: with(string(domainUID)), want: with(string(domainUID))},
		{name: "another domain's", labels: with(string(otherUID)), want: with(string(otherUID)), wantErr: nodeplugin.ErrNodeServesOtherDomain},
		{name: "unlabel", labels: with(string(domainUID)), unlabel: true, want: other},
		{name: "unlabel another domain's", labels: with(string(otherUID)), unlabel: true, want: with(string(otherUID))},
		{name: "unlabel none", labels: other, unlabel: true, want: other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := nodeClient(t, tc.labels, interceptor.Funcs{})
			l := nodeplugin.NewClientNodeLabeler(c, "n1")
			op := l.Label
			if tc.unlabel {
				op = l.Unlabel
			}
			if err := op(t.Context(), domainUID); !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, nodeLabels(t, c)); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClientNodeLabelerConflict: a label another writer sets between the read and the patch is
// not overwritten: the patch carries the resourceVersion read, conflicts, and the fresh read
// refuses the other domain.
func TestClientNodeLabelerConflict(t *testing.T) {
	raced := false
	c := nodeClient(t, nil, interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if !raced {
			raced = true
			var n corev1.Node
			if err := cl.Get(ctx, client.ObjectKey{Name: "n1"}, &n); err != nil {
				return err
			}
			n.Labels = map[string]string{computedomain.NodeLabel: string(otherUID)}
			if err := cl.Update(ctx, &n); err != nil {
				return err
			}
		}
		return cl.Patch(ctx, obj, patch, opts...)
	}})
	err := nodeplugin.NewClientNodeLabeler(c, "n1").Label(t.Context(), domainUID)
	if !errors.Is(err, nodeplugin.ErrNodeServesOtherDomain) {
		t.Errorf("Label after a racing writer: %v, want ErrNodeServesOtherDomain", err)
	}
	if got := nodeLabels(t, c)[computedomain.NodeLabel]; got != string(otherUID) {
		t.Errorf("label %q, want the racing writer's %s", got, otherUID)
	}
}

// TestClientNodeLabelerErrors: API errors say which node.
func TestClientNodeLabelerErrors(t *testing.T) {
	c := nodeClient(t, nil, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "n1")
	}})
	err := nodeplugin.NewClientNodeLabeler(c, "n1").Label(t.Context(), types.UID(domainUID))
	if err == nil || !strings.Contains(err.Error(), "get node n1") || !apierrors.IsNotFound(err) {
		t.Errorf("Label: %v", err)
	}
}
