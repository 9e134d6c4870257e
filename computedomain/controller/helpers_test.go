package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// The driver's namespace and the clique IDs of the tests.
const (
	driverNS = "nvidia-dra"
	cliqueA  = "0f5a9c6e-0000-4000-8000-00000000000a.1"
	cliqueB  = "0f5a9c6e-0000-4000-8000-00000000000b.2"
)

// driverPod is the driver's daemon pod template in the tests.
func driverPod() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "imex-daemon"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "imex-daemon",
			Tolerations:        []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:    "imex",
				Image:   "example.com/gpudra/imex-daemon:v1",
				Command: []string{"/usr/bin/imex-daemon"},
				Env:     []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "2"}},
			}},
		},
	}
}

// testEnv is a fake API server, an event recorder and the controller on them.
type testEnv struct {
	t        *testing.T
	ctx      context.Context
	client   client.Client
	recorder *events.FakeRecorder
	ctrl     *Reconciler
}

// newEnv starts a test environment holding objs; funcs intercept the client's calls.
func newEnv(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) *testEnv {
	t.Helper()
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&cdv1beta1.ComputeDomain{}).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	c := b.Build()
	rec := events.NewFakeRecorder(10)
	r, err := New(c, WithDriverNamespace(driverNS), WithDaemonPodTemplate(driverPod()), WithEventRecorder(rec), WithNoCliqueRetry(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	return &testEnv{t: t, ctx: ctx, client: c, recorder: rec, ctrl: r}
}

// useCacheLike gives e a controller whose client answers Get as the manager's cache that
// CacheByObject configures does (claim templates and DaemonSets without NodeLabel are not
// found) and whose uncached reader is reader.
func (e *testEnv) useCacheLike(reader client.Reader) {
	e.t.Helper()
	cached := interceptor.NewClient(e.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			var gr schema.GroupResource
			switch obj.(type) {
			case *resourcev1.ResourceClaimTemplate:
				gr = resourcev1.Resource("resourceclaimtemplates")
			case *appsv1.DaemonSet:
				gr = appsv1.Resource("daemonsets")
			default:
				return nil
			}
			if obj.GetLabels()[domainLabel] == "" {
				return apierrors.NewNotFound(gr, key.Name)
			}
			return nil
		}})
	r, err := New(cached, WithDriverNamespace(driverNS), WithDaemonPodTemplate(driverPod()), WithEventRecorder(e.recorder),
		WithNoCliqueRetry(5*time.Second), WithUncachedReader(reader))
	if err != nil {
		e.t.Fatal(err)
	}
	e.ctrl = r
}

// reconcile reconciles the domain ns/name once and fails the test on an error.
func (e *testEnv) reconcile(ns, name string) reconcile.Result {
	e.t.Helper()
	res, err := e.ctrl.Reconcile(e.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	if err != nil {
		e.t.Fatalf("reconcile %s/%s: %v", ns, name, err)
	}
	return res
}

// domain reads the domain ns/name.
func (e *testEnv) domain(ns, name string) *cdv1beta1.ComputeDomain {
	e.t.Helper()
	cd := &cdv1beta1.ComputeDomain{}
	if err := e.client.Get(e.ctx, types.NamespacedName{Namespace: ns, Name: name}, cd); err != nil {
		e.t.Fatalf("get ComputeDomain %s/%s: %v", ns, name, err)
	}
	return cd
}

// get reads obj (by its name and namespace) and fails the test when it cannot.
func (e *testEnv) get(obj client.Object) {
	e.t.Helper()
	if err := e.client.Get(e.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		e.t.Fatalf("get %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
}

// events drains the recorded events.
func (e *testEnv) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// newDomain is a domain of numNodes nodes; a non-empty template asks for a channel template
// of that name.
func newDomain(name, uid string, numNodes int, template string) *cdv1beta1.ComputeDomain {
	cd := &cdv1beta1.ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID(uid)},
		Spec:       cdv1beta1.ComputeDomainSpec{NumNodes: numNodes},
	}
	if template != "" {
		cd.Spec.Channel = &cdv1beta1.ComputeDomainChannelSpec{ResourceClaimTemplate: cdv1beta1.ResourceClaimTemplateReference{Name: template}}
	}
	return cd
}

// withStatus is cd with clique chosen, finalizer set and nodes.
func withStatus(cd *cdv1beta1.ComputeDomain, clique string, nodes ...cdv1beta1.ComputeDomainNode) *cdv1beta1.ComputeDomain {
	cd.Finalizers = []string{Finalizer}
	cd.Status = cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusNotReady, CliqueID: clique, Nodes: nodes}
	return cd
}

// newNode is a Node with labels given as key, value pairs.
func newNode(name string, kv ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for i := 0; i+1 < len(kv); i += 2 {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[kv[i]] = kv[i+1]
	}
	return n
}

// newSlice is the compute-domain slice a node plugin publishes for a node of clique: channel-0
// and daemon-0, as the contract says.
func newSlice(node, clique string) *resourcev1.ResourceSlice {
	dev := func(name, typ string) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type":     {StringValue: ptr.To(typ)},
			"id":       {IntValue: ptr.To[int64](0)},
			"cliqueID": {StringValue: ptr.To(clique)},
		}}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-compute-domain.nvidia.com"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   "compute-domain.nvidia.com",
			NodeName: ptr.To(node),
			Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices:  []resourcev1.Device{dev("channel-0", "channel"), dev("daemon-0", "daemon")},
		},
	}
}

// daemonPod is a pod of the daemon DaemonSet of the domain with uid, on node, in phase.
func daemonPod(uid, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "computedomain-daemon-" + uid + "-" + node, Namespace: driverNS, Labels: map[string]string{"resource.nvidia.com/computeDomain": uid}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// cmpEmpty treats nil and empty maps and slices alike.
func cmpEmpty() cmp.Option { return cmpopts.EquateEmpty() }

// requestFor is the reconcile request of obj.
func requestFor(obj client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
}

// ignoreServerFields ignores what the fake API server sets on objects.
func ignoreServerFields() cmp.Options {
	return cmp.Options{
		cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "CreationTimestamp", "Generation", "ManagedFields", "UID"),
		cmpopts.IgnoreFields(metav1.TypeMeta{}, "Kind", "APIVersion"),
		cmpopts.EquateEmpty(),
		// Opaque parameters compare as JSON values.
		cmp.Transformer("json", func(r runtime.RawExtension) any {
			var v any
			if err := json.Unmarshal(r.Raw, &v); err != nil {
				return string(r.Raw)
			}
			return v
		}),
	}
}
