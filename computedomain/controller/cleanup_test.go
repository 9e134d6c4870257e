package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// deleting marks cd deleted (its finalizer holds it).
func deleting(cd *cdv1beta1.ComputeDomain) *cdv1beta1.ComputeDomain {
	cd.DeletionTimestamp = ptr.To(metav1.NewTime(time.Unix(100, 0)))
	return cd
}

// TestDeletion: a deleted domain's DaemonSet, claim templates and node labels go, then its
// finalizer (and so the domain); other domains' labels and objects not made for the domain stay.
func TestDeletion(t *testing.T) {
	tests := []struct {
		name   string
		domain func() *cdv1beta1.ComputeDomain
		made   bool // whether the controller made the domain's objects before
	}{
		{"after its objects were made", func() *cdv1beta1.ComputeDomain {
			return withStatus(newDomain("training", shapeUID, 2, "training-channel"), cliqueA)
		}, true},
		{"before a clique was chosen", func() *cdv1beta1.ComputeDomain {
			cd := newDomain("training", shapeUID, 2, "training-channel")
			cd.Finalizers = []string{Finalizer}
			return cd
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []client.Object{
				deleting(tt.domain()),
				newNode("a-0", domainLabel, shapeUID, "zone", "z1"),
				newNode("a-1", domainLabel, shapeUID),
				newNode("b-0", domainLabel, "uid-other"),
				newNode("b-1"),
			}
			if tt.made {
				objs = append(objs, contractChannelTemplate(), contractDaemonTemplate(), contractDaemonSet())
			}
			e := newEnv(t, nil, objs...)
			e.reconcile("team-a", "training")

			for _, obj := range []client.Object{contractChannelTemplate(), contractDaemonTemplate(), contractDaemonSet()} {
				if err := e.client.Get(e.ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
					t.Errorf("%T %s after the domain's deletion: %v, want not found", obj, obj.GetName(), err)
				}
			}
			var nodes corev1.NodeList
			if err := e.client.List(e.ctx, &nodes); err != nil {
				t.Fatal(err)
			}
			labels := map[string]map[string]string{}
			for _, n := range nodes.Items {
				labels[n.Name] = n.Labels
			}
			want := map[string]map[string]string{
				"a-0": {"zone": "z1"}, "a-1": nil, "b-0": {domainLabel: "uid-other"}, "b-1": nil,
			}
			if diff := cmp.Diff(want, labels, cmpEmpty()); diff != "" {
				t.Errorf("node labels (-want +got):\n%s", diff)
			}
			err := e.client.Get(e.ctx, client.ObjectKey{Namespace: "team-a", Name: "training"}, &cdv1beta1.ComputeDomain{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("the domain after cleanup: %v, want it gone (finalizer removed)", err)
			}
		})
	}
}

// TestDeletionLeavesOthersObjects: objects of the domain's names without its label stay.
func TestDeletionLeavesOthersObjects(t *testing.T) {
	channel := contractChannelTemplate()
	channel.Labels = map[string]string{domainLabel: "uid-other"}
	ds := contractDaemonSet()
	ds.Labels = nil
	e := newEnv(t, nil, deleting(withStatus(newDomain("training", shapeUID, 2, "training-channel"), cliqueA)), channel, ds)
	e.reconcile("team-a", "training")
	e.get(&resourcev1.ResourceClaimTemplate{ObjectMeta: channel.ObjectMeta})
	e.get(&appsv1.DaemonSet{ObjectMeta: ds.ObjectMeta})
}

// TestDeletionKeepsFinalizerOnFailure: when a cleanup step fails, the finalizer stays, so the
// next reconcile finishes the cleanup.
func TestDeletionKeepsFinalizerOnFailure(t *testing.T) {
	failing := &interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				return errors.New("injected: the API server refuses the node patch")
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	}
	e := newEnv(t, failing, deleting(withStatus(newDomain("training", shapeUID, 2, "training-channel"), cliqueA)),
		contractDaemonSet(), newNode("a-0", domainLabel, shapeUID))
	if _, err := e.ctrl.Reconcile(e.ctx, requestFor(newDomain("training", shapeUID, 2, ""))); err == nil {
		t.Fatal("reconciled a deletion whose node label could not be removed, want an error")
	}
	if diff := cmp.Diff([]string{Finalizer}, e.domain("team-a", "training").Finalizers); diff != "" {
		t.Errorf("finalizers after a failed cleanup (-want +got):\n%s", diff)
	}
}

// TestDeletionOfGoneDomain: a deletion reconciled again from a cache that still holds the
// domain, which the finalizer's removal already let go, is no error (the API server answers the
// patch NotFound).
func TestDeletionOfGoneDomain(t *testing.T) {
	gone := &interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if cd, ok := obj.(*cdv1beta1.ComputeDomain); ok {
				return apierrors.NewNotFound(cdv1beta1.GroupVersion().WithResource("computedomains").GroupResource(), cd.Name)
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	}
	e := newEnv(t, gone, deleting(withStatus(newDomain("training", shapeUID, 2, "training-channel"), cliqueA)))
	if _, err := e.ctrl.Reconcile(e.ctx, requestFor(newDomain("training", shapeUID, 2, ""))); err != nil {
		t.Errorf("reconcile of a domain already gone: %v", err)
	}
}
