package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

func TestNewValidates(t *testing.T) {
	withClaim := driverPod()
	withClaim.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
	tests := []struct {
		name    string
		opts    []Option
		wantErr string // "" for none
	}{
		{"complete", []Option{WithDriverNamespace(driverNS), WithDaemonPodTemplate(driverPod())}, ""},
		{"no namespace", []Option{WithDaemonPodTemplate(driverPod())}, `driver namespace "" (WithDriverNamespace)`},
		{"bad namespace", []Option{WithDriverNamespace("NVIDIA_DRA"), WithDaemonPodTemplate(driverPod())}, `driver namespace "NVIDIA_DRA"`},
		{"no template", []Option{WithDriverNamespace(driverNS)}, "has no container"},
		{"template without containers", []Option{WithDriverNamespace(driverNS), WithDaemonPodTemplate(corev1.PodTemplateSpec{})}, "has no container"},
		{"template with claims", []Option{WithDriverNamespace(driverNS), WithDaemonPodTemplate(withClaim)}, `spec.resourceClaims "gpu"`},
		{"zero retry", []Option{WithDriverNamespace(driverNS), WithDaemonPodTemplate(driverPod()), WithNoCliqueRetry(0)}, "must be positive"},
	}
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).Build()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(c, tt.opts...)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("New: %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("New: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestTemplateCopied: the driver's template is copied at New, so a later change of the
// caller's does not reach the DaemonSets; and each domain's DaemonSet is built on a copy.
func TestTemplateCopied(t *testing.T) {
	pod := driverPod()
	r, err := New(fake.NewClientBuilder().Build(), WithDriverNamespace(driverNS), WithDaemonPodTemplate(pod))
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.Containers[0].Image = "changed"
	cd := newDomain("training", shapeUID, 1, "")
	ds := daemonSet(cd, driverNS, &r.podTemplate)
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != "example.com/gpudra/imex-daemon:v1" {
		t.Errorf("image %q, want the one given to New", got)
	}
	if n := len(r.podTemplate.Spec.Containers[0].Env); n != 1 {
		t.Errorf("the driver's template has %d env vars after building a DaemonSet, want its 1", n)
	}
}

// TestConflicts: a conflict with a concurrent write ends the reconcile without an error (the
// write's event reconciles again); other write errors are returned.
func TestConflicts(t *testing.T) {
	conflict := apierrors.NewConflict(cdv1beta1.Resource(), "training", errors.New("the object has been modified"))
	statusFails := func(err error) *interceptor.Funcs {
		return &interceptor.Funcs{
			SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
				return err
			},
		}
	}
	// A node label write that conflicts (a kubelet updated the Node meanwhile): no event of the
	// domain's watches follows, so only the requeue reconciles it again.
	nodePatchFails := &interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				return apierrors.NewConflict(corev1.Resource("nodes"), obj.GetName(), errors.New("the object has been modified"))
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
	tests := []struct {
		name        string
		funcs       *interceptor.Funcs
		claims      bool // a channel claim allocated on a-0, so that a-0 is labelled
		wantErr     bool
		wantRequeue bool
	}{
		{"status conflict", statusFails(conflict), false, false, true},
		{"node label conflict", nodePatchFails, true, false, true},
		{"forbidden", statusFails(apierrors.NewForbidden(cdv1beta1.Resource(), "training", errors.New("no"))), false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cd := newDomain("training", shapeUID, 1, "training-channel")
			objs := []client.Object{cd, newNode("a-0"), newSlice("a-0", cliqueA)}
			if tt.claims {
				objs = append(objs, channelClaim("job-0", "team-a", shapeUID, "a-0"))
			}
			e := newEnv(t, tt.funcs, objs...)
			res, err := e.ctrl.Reconcile(e.ctx, requestFor(cd))
			if (err != nil) != tt.wantErr {
				t.Errorf("Reconcile: %v, want an error: %v", err, tt.wantErr)
			}
			if got := res.RequeueAfter > 0; got != tt.wantRequeue {
				t.Errorf("Reconcile: %+v, want a requeue: %v", res, tt.wantRequeue)
			}
		})
	}
}

// TestFieldOwner: the controller's writes name it as their field manager, so that the
// domain's managed fields tell its status fields from the nodes' daemons'.
func TestFieldOwner(t *testing.T) {
	var managers []string
	funcs := &interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			o := &client.CreateOptions{}
			o.ApplyOptions(opts)
			managers = append(managers, "create "+o.FieldManager)
			return cl.Create(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			o := &client.SubResourceUpdateOptions{}
			o.ApplyOptions(opts)
			managers = append(managers, sub+" "+o.FieldManager)
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	}
	cd := newDomain("training", shapeUID, 1, "")
	e := newEnv(t, funcs, cd, newNode("a-0"), newSlice("a-0", cliqueA))
	e.reconcile("team-a", "training")
	want := []string{"status computedomain-controller", "create computedomain-controller", "create computedomain-controller"}
	if diff := cmp.Diff(want, managers); diff != "" {
		t.Errorf("field managers of the writes (-want +got):\n%s", diff)
	}
}
