package controller

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// calls records the API verbs the controller uses, as "group resource verb" ("" group is
// core), while on.
type calls struct {
	mu     sync.Mutex
	on     bool
	scheme *runtime.Scheme
	seen   sets.Set[string]
}

// record notes verbs on the resource of obj (an object or a list), with subresource.
func (c *calls) record(t *testing.T, obj runtime.Object, subresource string, verbs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return
	}
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		t.Errorf("no kind for %T: %v", obj, err)
		return
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	resource := plural.Resource
	if subresource != "" {
		resource += "/" + subresource
	}
	for _, v := range verbs {
		c.seen.Insert(gvk.Group + " " + resource + " " + v)
	}
}

// funcs are interceptors that record every call; reads need list and watch (the manager's
// cache serves them).
func (c *calls) funcs(t *testing.T) *interceptor.Funcs {
	return &interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			c.record(t, obj, "", "list", "watch")
			return cl.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			c.record(t, list, "", "list", "watch")
			return cl.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			c.record(t, obj, "", "create")
			return cl.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			c.record(t, obj, "", "update")
			return cl.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			c.record(t, obj, "", "delete")
			return cl.Delete(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			c.record(t, obj, "", "patch")
			return cl.Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			c.record(t, obj, sub, "update")
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			c.record(t, obj, sub, "patch")
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// granted are the "group resource verb" Rules grants.
func granted() sets.Set[string] {
	out := sets.New[string]()
	for _, r := range Rules() {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out.Insert(g + " " + res + " " + v)
				}
			}
		}
	}
	return out
}

// TestRules: Rules grants every verb the controller uses in its life (make, put back, status,
// no clique, deletion), the watches and what the API server asks besides, and nothing more.
func TestRules(t *testing.T) {
	rec := &calls{seen: sets.New[string]()}
	cd := newDomain("training", shapeUID, 2, "training-channel")
	e := newEnv(t, rec.funcs(t), cd, newDomain("big", "uid-big", 9, ""),
		newNode("a-0"), newSlice("a-0", cliqueA), newNode("a-1"), newSlice("a-1", cliqueA),
		daemonPod(shapeUID, "a-0", "Running"))
	rec.scheme = e.client.Scheme()
	// The controller reads through a cache of labelled objects, and the rest from the API
	// server (get).
	e.useCacheLike(interceptor.NewClient(e.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			rec.record(t, obj, "", "get")
			return cl.Get(ctx, key, obj, opts...)
		}}))
	step := func(do func()) {
		rec.mu.Lock()
		rec.on = true
		rec.mu.Unlock()
		do()
		rec.mu.Lock()
		rec.on = false
		rec.mu.Unlock()
	}

	step(func() { e.reconcile("team-a", "training"); e.reconcile("team-a", "big") })
	channel, daemon, ds := contractChannelTemplate(), contractDaemonTemplate(), contractDaemonSet()
	e.get(channel)
	e.get(daemon)
	e.get(ds)
	channel.Labels = nil
	daemon.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = "x"
	ds.Spec.Template.Spec.Containers[0].Image = "x"
	ds.Labels = nil
	for _, obj := range []client.Object{channel, daemon, ds} {
		if err := e.client.Update(e.ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	node := newNode("a-0")
	e.get(node)
	node.Labels = map[string]string{domainLabel: shapeUID}
	if err := e.client.Update(e.ctx, node); err != nil {
		t.Fatal(err)
	}
	step(func() { e.reconcile("team-a", "training") })
	if err := e.client.Delete(e.ctx, e.domain("team-a", "training")); err != nil {
		t.Fatal(err)
	}
	step(func() { e.reconcile("team-a", "training") })

	need := rec.seen.Clone()
	// The watches of SetupWithManager, as the contract lists them.
	for _, r := range []string{
		"resource.nvidia.com computedomains", "apps daemonsets", " pods",
		"resource.k8s.io resourceclaimtemplates", " nodes", "resource.k8s.io resourceslices",
	} {
		need.Insert(r+" list", r+" watch")
	}
	// Owner references with blockOwnerDeletion (OwnerReferencesPermissionEnforcement).
	need.Insert("resource.nvidia.com computedomains/finalizers update")
	// The events.k8s.io recorder creates events and patches repeated ones.
	need.Insert("events.k8s.io events create", "events.k8s.io events patch")

	if missing := sets.List(need.Difference(granted())); len(missing) > 0 {
		t.Errorf("Rules grants none of: %q", missing)
	}
	if extra := sets.List(granted().Difference(need)); len(extra) > 0 {
		t.Errorf("Rules grants what the controller does not use: %q", extra)
	}
	// Every write the controller makes, and every read past the cache, went through the
	// recorder: the scenario covered them.
	wantWrites := []string{
		" nodes patch",
		"apps daemonsets create", "apps daemonsets delete", "apps daemonsets get", "apps daemonsets update",
		"resource.k8s.io resourceclaimtemplates create", "resource.k8s.io resourceclaimtemplates delete",
		"resource.k8s.io resourceclaimtemplates get", "resource.k8s.io resourceclaimtemplates update",
		"resource.nvidia.com computedomains patch", "resource.nvidia.com computedomains/status update",
	}
	var writes []string
	for _, s := range sets.List(rec.seen) {
		if !strings.HasSuffix(s, " list") && !strings.HasSuffix(s, " watch") {
			writes = append(writes, s)
		}
	}
	slices.Sort(writes)
	if diff := cmp.Diff(wantWrites, writes); diff != "" {
		t.Errorf("writes the scenario saw (-want +got):\n%s", diff)
	}
}
