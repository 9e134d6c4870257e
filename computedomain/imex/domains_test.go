package imex_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

const (
	domainUID = types.UID("0f8fad5b-d9cb-469f-a165-70867728950e")
	clique    = "5e1c4f2a-9d3b-4c7e-8a6f-2b1d0c9e8f7a.3"
)

func domainKey() types.NamespacedName { return types.NamespacedName{Namespace: "team", Name: "train"} }

func newDomain(nodes ...v1beta1.ComputeDomainNode) *v1beta1.ComputeDomain {
	return &v1beta1.ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "train", UID: domainUID},
		Status:     v1beta1.ComputeDomainStatus{CliqueID: clique, Nodes: nodes},
	}
}

// TestClientDomainsKeepOtherEntries: a node's apply and removal touch its own entry only: the
// other node's entry (with the controller's index) survives, and removal takes the whole entry.
func TestClientDomainsKeepOtherEntries(t *testing.T) {
	ctx := context.Background()
	b, err := imextest.NewClientBuilder()
	if err != nil {
		t.Fatal(err)
	}
	c := b.WithObjects(newDomain(v1beta1.ComputeDomainNode{Name: "node-b", IPAddress: "10.0.0.2", CliqueID: clique, Index: 1, Status: v1beta1.StatusReady})).Build()
	d := imex.ClientDomains{Client: c}
	key := domainKey()
	apply := func(n v1beta1.ComputeDomainNode) {
		t.Helper()
		if err := d.ApplyNode(ctx, key, domainUID, imex.FieldManager(n.Name), n); err != nil {
			t.Fatal(err)
		}
	}
	apply(v1beta1.ComputeDomainNode{Name: "node-a", IPAddress: "10.0.0.1", CliqueID: clique, Status: v1beta1.StatusNotReady})
	apply(v1beta1.ComputeDomainNode{Name: "node-a", IPAddress: "10.0.0.1", CliqueID: clique, Status: v1beta1.StatusReady})
	got, err := d.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1beta1.ComputeDomainNode{
		{Name: "node-b", IPAddress: "10.0.0.2", CliqueID: clique, Index: 1, Status: v1beta1.StatusReady},
		{Name: "node-a", IPAddress: "10.0.0.1", CliqueID: clique, Status: v1beta1.StatusReady},
	}
	if diff := cmp.Diff(want, got.Status.Nodes); diff != "" {
		t.Errorf("status.nodes after node-a's applies (-want +got):\n%s", diff)
	}
	// A domain of the same name with another UID (deleted and created again) is left alone.
	if err := d.RemoveNode(ctx, key, "another-uid", imex.FieldManager("node-a"), "node-a"); err != nil {
		t.Fatal(err)
	}
	if got, err = d.Get(ctx, key); err != nil || len(got.Status.Nodes) != 2 {
		t.Fatalf("after removal from another domain's UID: %v, %v; want both entries", got.Status.Nodes, err)
	}
	if err := d.RemoveNode(ctx, key, domainUID, imex.FieldManager("node-a"), "node-a"); err != nil {
		t.Fatal(err)
	}
	if got, err = d.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[:1], got.Status.Nodes); diff != "" {
		t.Errorf("status.nodes after node-a's removal (-want +got):\n%s", diff)
	}
}

// TestClientDomainsApplyBody: the apply sends the node's four fields and nothing else (the
// index is the controller's), with the domain's UID, as the node's field manager, forced. (The
// fake client turns every apply into a typed ComputeDomain, which gives each entry an index of
// 0, so only the request itself can show this.)
func TestClientDomainsApplyBody(t *testing.T) {
	b, err := imextest.NewClientBuilder()
	if err != nil {
		t.Fatal(err)
	}
	var body string
	var opts client.SubResourceApplyOptions
	c := b.WithObjects(newDomain()).WithInterceptorFuncs(interceptor.Funcs{
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, o ...client.SubResourceApplyOption) error {
			j, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			body = sub + " " + string(j)
			opts.ApplyOpts(o)
			return nil
		},
	}).Build()
	node := v1beta1.ComputeDomainNode{Name: "node-a", IPAddress: "10.0.0.1", CliqueID: clique, Index: 7, Status: v1beta1.StatusReady}
	if err := (imex.ClientDomains{Client: c}).ApplyNode(context.Background(), domainKey(), domainUID, imex.FieldManager("node-a"), node); err != nil {
		t.Fatal(err)
	}
	want := `status {"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomain",` +
		`"metadata":{"name":"train","namespace":"team","uid":"0f8fad5b-d9cb-469f-a165-70867728950e"},` +
		`"status":{"nodes":[{"cliqueID":"5e1c4f2a-9d3b-4c7e-8a6f-2b1d0c9e8f7a.3","ipAddress":"10.0.0.1","name":"node-a","status":"Ready"}]}}`
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("apply request (-want +got):\n%s", diff)
	}
	if opts.FieldManager != "imex-daemon/node-a" || opts.Force == nil || !*opts.Force {
		t.Errorf("apply options: field manager %q, force %v; want imex-daemon/node-a, forced", opts.FieldManager, opts.Force)
	}
}
