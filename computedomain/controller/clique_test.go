package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

const domainLabel = "resource.nvidia.com/computeDomain"

// rack is the slices and nodes of n nodes prefix-0.. in clique.
func rack(prefix, clique string, n int) ([]resourcev1.ResourceSlice, []corev1.Node) {
	var slices []resourcev1.ResourceSlice
	var nodes []corev1.Node
	for i := range n {
		name := prefix + "-" + string(rune('0'+i))
		slices = append(slices, *newSlice(name, clique))
		nodes = append(nodes, *newNode(name))
	}
	return slices, nodes
}

// world is two racks: a-0..a-3 in clique A and b-0..b-3 in clique B, changed by edits.
func world(edits ...func(*cliqueWorld)) *cliqueWorld {
	sa, na := rack("a", cliqueA, 4)
	sb, nb := rack("b", cliqueB, 4)
	w := &cliqueWorld{Slices: append(sa, sb...), Nodes: append(na, nb...)}
	for _, e := range edits {
		e(w)
	}
	return w
}

// label labels node for the domain with uid.
func label(node, uid string) func(*cliqueWorld) {
	return func(w *cliqueWorld) {
		for i := range w.Nodes {
			if w.Nodes[i].Name == node {
				w.Nodes[i].Labels = map[string]string{domainLabel: uid}
			}
		}
	}
}

// pinned adds a domain with uid and numNodes whose clique is chosen.
func pinned(uid string, numNodes int, clique string) func(*cliqueWorld) {
	return func(w *cliqueWorld) {
		w.Domains = append(w.Domains, *withStatus(newDomain("other-"+uid, uid, numNodes, ""), clique))
	}
}

func TestChooseClique(t *testing.T) {
	const self = "uid-self"
	tests := []struct {
		name      string
		numNodes  int
		world     *cliqueWorld
		want      string
		wantRooms []cliqueRoom
	}{
		{
			name: "equal room: the lower clique ID", numNodes: 3, world: world(),
			want: cliqueA, wantRooms: []cliqueRoom{{cliqueA, 4}, {cliqueB, 4}},
		},
		{
			name: "a second domain goes to the other clique", numNodes: 3, world: world(pinned("uid-1", 3, cliqueA)),
			want: cliqueB, wantRooms: []cliqueRoom{{cliqueA, 1}, {cliqueB, 4}},
		},
		{
			name: "the clique with the most free nodes", numNodes: 1,
			world: world(label("b-0", "uid-1"), label("b-1", "uid-1"), pinned("uid-1", 2, cliqueB)),
			want:  cliqueA, wantRooms: []cliqueRoom{{cliqueA, 4}, {cliqueB, 2}},
		},
		{
			name: "nodes labelled for another domain are not free", numNodes: 3,
			world: world(label("a-0", "uid-1"), label("a-1", "uid-1"), pinned("uid-1", 2, cliqueA), label("b-0", "uid-2")),
			want:  cliqueB, wantRooms: []cliqueRoom{{cliqueA, 2}, {cliqueB, 3}},
		},
		{
			name: "a domain pinned to a clique reserves only the nodes it still needs", numNodes: 1,
			world: world(label("a-0", "uid-1"), pinned("uid-1", 3, cliqueA), label("b-0", "uid-2"), label("b-1", "uid-2"), label("b-2", "uid-2")),
			want:  cliqueA, wantRooms: []cliqueRoom{{cliqueA, 1}, {cliqueB, 1}},
		},
		{
			name: "nodes labelled for this domain are free", numNodes: 4,
			world: world(label("b-0", self), label("a-0", "uid-1")),
			want:  cliqueB, wantRooms: []cliqueRoom{{cliqueA, 3}, {cliqueB, 4}},
		},
		{
			name: "a domain being deleted reserves nothing", numNodes: 4,
			world: world(pinned("uid-1", 4, cliqueA), func(w *cliqueWorld) {
				w.Domains[0].DeletionTimestamp = ptr.To(metav1.NewTime(time.Unix(1, 0)))
			}, pinned("uid-2", 4, cliqueB)),
			want: cliqueA, wantRooms: []cliqueRoom{{cliqueA, 4}, {cliqueB, 0}},
		},
		{
			name: "a domain waiting for a clique reserves nothing", numNodes: 4,
			world: world(func(w *cliqueWorld) { w.Domains = append(w.Domains, *newDomain("waiting", "uid-1", 4, "")) }),
			want:  cliqueA, wantRooms: []cliqueRoom{{cliqueA, 4}, {cliqueB, 4}},
		},
		{
			name: "numNodes 0 needs one free node", numNodes: 0,
			world: world(pinned("uid-1", 4, cliqueA), pinned("uid-2", 4, cliqueB)),
			want:  "", wantRooms: []cliqueRoom{{cliqueA, 0}, {cliqueB, 0}},
		},
		{
			name: "no clique has room", numNodes: 5, world: world(label("a-3", "uid-1")),
			want: "", wantRooms: []cliqueRoom{{cliqueA, 3}, {cliqueB, 4}},
		},
		{
			name: "a node with a slice but no Node object is not free", numNodes: 4,
			world: world(func(w *cliqueWorld) { w.Nodes = w.Nodes[1:] }),
			want:  cliqueB, wantRooms: []cliqueRoom{{cliqueA, 3}, {cliqueB, 4}},
		},
		{
			name: "only channel devices of the driver's current pool generation count", numNodes: 1,
			world: world(func(w *cliqueWorld) {
				w.Slices = w.Slices[:4]
				other := newSlice("b-0", cliqueB)
				other.Spec.Driver = "gpu.nvidia.com"
				old := newSlice("b-1", cliqueB)
				newer := newSlice("b-1", cliqueA)
				newer.Spec.Pool.Generation = 2
				daemonOnly := newSlice("b-2", cliqueB)
				daemonOnly.Spec.Devices = daemonOnly.Spec.Devices[1:]
				bad := newSlice("b-3", "x' || true || '")
				w.Slices = append(w.Slices, *other, *old, *newer, *daemonOnly, *bad)
			}),
			want: cliqueA, wantRooms: []cliqueRoom{{cliqueA, 5}},
		},
		{
			name: "qualified attribute names", numNodes: 1,
			world: world(func(w *cliqueWorld) {
				w.Slices = w.Slices[4:5]
				d := &w.Slices[0].Spec.Devices[0]
				d.Attributes = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"compute-domain.nvidia.com/type":     {StringValue: ptr.To("channel")},
					"compute-domain.nvidia.com/cliqueID": {StringValue: ptr.To(cliqueB)},
				}
			}),
			want: cliqueB, wantRooms: []cliqueRoom{{cliqueB, 1}},
		},
		{
			name: "no slices", numNodes: 1, world: &cliqueWorld{},
			want: "", wantRooms: []cliqueRoom{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cd := newDomain("self", self, tt.numNodes, "")
			got, rooms := chooseClique(cd, tt.world)
			if got != tt.want {
				t.Errorf("chose clique %q, want %q", got, tt.want)
			}
			if diff := cmp.Diff(tt.wantRooms, rooms); diff != "" {
				t.Errorf("rooms (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconcileTwoDomains: the first domain takes the lower clique, the second the other one,
// and neither choice changes when the world does.
func TestReconcileTwoDomains(t *testing.T) {
	objs := []client.Object{newDomain("first", "uid-1", 2, ""), newDomain("second", "uid-2", 2, "")}
	for _, n := range []string{"a-0", "a-1", "b-0", "b-1"} {
		clique := cliqueA
		if n[0] == 'b' {
			clique = cliqueB
		}
		objs = append(objs, newNode(n), newSlice(n, clique))
	}
	e := newEnv(t, nil, objs...)
	e.reconcile("team-a", "first")
	e.reconcile("team-a", "second")
	if got := e.domain("team-a", "first").Status.CliqueID; got != cliqueA {
		t.Errorf("first domain's clique %q, want %q", got, cliqueA)
	}
	if got := e.domain("team-a", "second").Status.CliqueID; got != cliqueB {
		t.Errorf("second domain's clique %q, want %q", got, cliqueB)
	}
	// Clique B's nodes go to a third domain: the second keeps its clique.
	for _, n := range []string{"b-0", "b-1"} {
		node := newNode(n)
		e.get(node)
		node.Labels = map[string]string{domainLabel: "uid-3"}
		if err := e.client.Update(e.ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile("team-a", "second")
	if got := e.domain("team-a", "second").Status.CliqueID; got != cliqueB {
		t.Errorf("after clique B filled up, the second domain's clique is %q, want it kept: %q", got, cliqueB)
	}
	if ev := e.events(); len(ev) > 0 {
		t.Errorf("events %q, want none", ev)
	}
}

// TestReconcileNoClique: a domain no clique has room for gets a NoClique event that says
// each clique's room, an empty clique, NotReady, nothing made, and a retry.
func TestReconcileNoClique(t *testing.T) {
	e := newEnv(t, nil, newDomain("big", "uid-1", 3, "big-channel"),
		newNode("a-0"), newSlice("a-0", cliqueA), newNode("a-1"), newSlice("a-1", cliqueA),
		newNode("b-0", domainLabel, "uid-2"), newSlice("b-0", cliqueB))
	res := e.reconcile("team-a", "big")
	if res.RequeueAfter != 5*time.Second {
		t.Errorf("requeue after %v, want the configured 5s", res.RequeueAfter)
	}
	want := []string{"Warning NoClique no NVLink clique has 3 free node(s) for the domain: " + cliqueA + " has 2, " + cliqueB + " has 0"}
	if diff := cmp.Diff(want, e.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	cd := e.domain("team-a", "big")
	wantStatus := cdv1beta1.ComputeDomainStatus{Status: "NotReady"}
	if diff := cmp.Diff(wantStatus, cd.Status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"resource.nvidia.com/computedomain-cleanup"}, cd.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	var templates resourcev1.ResourceClaimTemplateList
	if err := e.client.List(e.ctx, &templates); err != nil {
		t.Fatal(err)
	}
	if len(templates.Items) > 0 {
		t.Errorf("made %d claim templates for a domain without a clique, want none", len(templates.Items))
	}
}

// TestStaleCache: the second domain's choice counts the first domain's clique even when the
// cache it lists domains from does not show it yet.
func TestStaleCache(t *testing.T) {
	stale := &interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := cl.List(ctx, list, opts...); err != nil {
				return err
			}
			if domains, ok := list.(*cdv1beta1.ComputeDomainList); ok {
				for i := range domains.Items {
					domains.Items[i].Status = cdv1beta1.ComputeDomainStatus{}
				}
			}
			return nil
		},
	}
	e := newEnv(t, stale, newDomain("first", "uid-1", 2, ""), newDomain("second", "uid-2", 2, ""),
		newNode("a-0"), newSlice("a-0", cliqueA), newNode("a-1"), newSlice("a-1", cliqueA),
		newNode("b-0"), newSlice("b-0", cliqueB), newNode("b-1"), newSlice("b-1", cliqueB))
	e.reconcile("team-a", "first")
	e.reconcile("team-a", "second")
	got := []string{e.domain("team-a", "first").Status.CliqueID, e.domain("team-a", "second").Status.CliqueID}
	if diff := cmp.Diff([]string{cliqueA, cliqueB}, got); diff != "" {
		t.Errorf("cliques of the first and second domain (-want +got):\n%s", diff)
	}
}
