package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// The domain of the shape tests.
const (
	shapeUID = "6f1c1d3e-8a4b-4c2d-9e0f-123456789abc"
	shapeSel = "device.attributes['compute-domain.nvidia.com'].cliqueID == '" + cliqueA + "'"
)

// contractChannelTemplate is the channel claim template the contract asks for, written out.
func contractChannelTemplate() *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name: "training-channel", Namespace: "team-a",
			Labels: map[string]string{"resource.nvidia.com/computeDomain": shapeUID},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "resource.nvidia.com/v1beta1", Kind: "ComputeDomain", Name: "training", UID: shapeUID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: "compute-domain-default-channel.nvidia.com",
				Selectors:       []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: shapeSel}}},
				AllocationMode:  resourcev1.DeviceAllocationModeExactCount, Count: 1,
			}}},
			Config: []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver:     "compute-domain.nvidia.com",
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"` + shapeUID + `","allocationMode":"All"}`)},
			}}}},
		}}},
	}
}

// contractDaemonTemplate is the daemon claim template the contract asks for, written out.
func contractDaemonTemplate() *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name: "computedomain-daemon-" + shapeUID, Namespace: driverNS,
			Labels: map[string]string{"resource.nvidia.com/computeDomain": shapeUID},
		},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "daemon", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: "compute-domain-daemon.nvidia.com",
				Selectors:       []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: shapeSel}}},
				AllocationMode:  resourcev1.DeviceAllocationModeExactCount, Count: 1,
			}}},
			Config: []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver:     "compute-domain.nvidia.com",
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"` + shapeUID + `"}`)},
			}}}},
		}}},
	}
}

// contractDaemonSet is the daemon DaemonSet the contract asks for, around driverPod, written out.
func contractDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"resource.nvidia.com/computeDomain": shapeUID}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "computedomain-daemon-" + shapeUID, Namespace: driverNS, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "imex-daemon", "resource.nvidia.com/computeDomain": shapeUID}},
				Spec: corev1.PodSpec{
					ServiceAccountName: "imex-daemon",
					Tolerations:        []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
					NodeSelector:       labels,
					ResourceClaims:     []corev1.PodResourceClaim{{Name: "daemon", ResourceClaimTemplateName: ptr.To("computedomain-daemon-" + shapeUID)}},
					Containers: []corev1.Container{{
						Name:      "imex",
						Image:     "example.com/gpudra/imex-daemon:v1",
						Command:   []string{"/usr/bin/imex-daemon"},
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "daemon"}}},
						Env: []corev1.EnvVar{
							{Name: "LOG_LEVEL", Value: "2"},
							{Name: "COMPUTE_DOMAIN_UUID", Value: shapeUID},
							{Name: "COMPUTE_DOMAIN_NAME", Value: "training"},
							{Name: "COMPUTE_DOMAIN_NAMESPACE", Value: "team-a"},
							{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
							{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
						},
					}},
				},
			},
		},
	}
}

// shapeEnv is a world with the training domain (channel template training-channel, mode All)
// and two free nodes of clique A.
func shapeEnv(t *testing.T) *testEnv {
	cd := newDomain("training", shapeUID, 2, "training-channel")
	cd.Spec.Channel.AllocationMode = cdv1beta1.AllocationModeAll
	return newEnv(t, nil, cd, newNode("a-0"), newSlice("a-0", cliqueA), newNode("a-1"), newSlice("a-1", cliqueA))
}

// checkShapes compares the objects the controller made with the contract's.
func checkShapes(t *testing.T, e *testEnv) {
	t.Helper()
	for _, want := range []client.Object{contractChannelTemplate(), contractDaemonTemplate(), contractDaemonSet()} {
		got := want.DeepCopyObject().(client.Object)
		e.get(got)
		if diff := cmp.Diff(want, got, ignoreServerFields()); diff != "" {
			t.Errorf("%T %s (-contract +made):\n%s", want, want.GetName(), diff)
		}
	}
}

// TestReconcileMakesContractObjects: the channel and daemon claim templates and the DaemonSet
// have exactly the contract's shape, and the domain its finalizer and clique.
func TestReconcileMakesContractObjects(t *testing.T) {
	e := shapeEnv(t)
	e.reconcile("team-a", "training")
	checkShapes(t, e)
	cd := e.domain("team-a", "training")
	if diff := cmp.Diff([]string{"resource.nvidia.com/computedomain-cleanup"}, cd.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cdv1beta1.ComputeDomainStatus{Status: "NotReady", CliqueID: cliqueA}, cd.Status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

// TestReconcileWithoutChannel: a domain without spec.channel gets its daemons but no channel
// template.
func TestReconcileWithoutChannel(t *testing.T) {
	e := newEnv(t, nil, newDomain("training", shapeUID, 1, ""), newNode("a-0"), newSlice("a-0", cliqueA))
	e.reconcile("team-a", "training")
	var list resourcev1.ResourceClaimTemplateList
	if err := e.client.List(e.ctx, &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tmpl := range list.Items {
		names = append(names, tmpl.Namespace+"/"+tmpl.Name)
	}
	if diff := cmp.Diff([]string{driverNS + "/computedomain-daemon-" + shapeUID}, names); diff != "" {
		t.Errorf("claim templates (-want +got):\n%s", diff)
	}
	e.get(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "computedomain-daemon-" + shapeUID, Namespace: driverNS}})
}

// TestPutBack: an object edited by hand, or left stale, is put back to the contract's shape.
func TestPutBack(t *testing.T) {
	channel := func(e *testEnv) *resourcev1.ResourceClaimTemplate {
		tmpl := contractChannelTemplate()
		e.get(tmpl)
		return tmpl
	}
	ds := func(e *testEnv) *appsv1.DaemonSet {
		d := contractDaemonSet()
		e.get(d)
		return d
	}
	tests := []struct {
		name string
		edit func(e *testEnv) client.Object
	}{
		{"channel selector changed", func(e *testEnv) client.Object {
			tmpl := channel(e)
			tmpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression = "true"
			return tmpl
		}},
		{"channel selector added", func(e *testEnv) client.Object {
			tmpl := channel(e)
			r := tmpl.Spec.Spec.Devices.Requests[0].Exactly
			r.Selectors = append(r.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: "false"}})
			return tmpl
		}},
		{"channel request added", func(e *testEnv) client.Object {
			tmpl := channel(e)
			d := &tmpl.Spec.Spec.Devices
			d.Requests = append(d.Requests, resourcev1.DeviceRequest{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}})
			return tmpl
		}},
		{"channel config's domain changed", func(e *testEnv) client.Object {
			tmpl := channel(e)
			tmpl.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw = []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"other","allocationMode":"All"}`)
			return tmpl
		}},
		{"channel label and owner removed", func(e *testEnv) client.Object {
			tmpl := channel(e)
			tmpl.Labels, tmpl.OwnerReferences = nil, nil
			return tmpl
		}},
		{"daemon template class changed", func(e *testEnv) client.Object {
			tmpl := contractDaemonTemplate()
			e.get(tmpl)
			tmpl.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gpu.nvidia.com"
			return tmpl
		}},
		{"daemon image changed", func(e *testEnv) client.Object {
			d := ds(e)
			d.Spec.Template.Spec.Containers[0].Image = "example.com/other:v2"
			return d
		}},
		{"daemon env dropped", func(e *testEnv) client.Object {
			d := ds(e)
			d.Spec.Template.Spec.Containers[0].Env = d.Spec.Template.Spec.Containers[0].Env[:2]
			return d
		}},
		{"daemon node selector added", func(e *testEnv) client.Object {
			d := ds(e)
			d.Spec.Template.Spec.NodeSelector["kubernetes.io/hostname"] = "a-0"
			return d
		}},
		{"daemon claim removed", func(e *testEnv) client.Object {
			d := ds(e)
			d.Spec.Template.Spec.ResourceClaims = nil
			d.Spec.Template.Spec.Containers[0].Resources.Claims = nil
			return d
		}},
		{"daemon set label removed", func(e *testEnv) client.Object {
			d := ds(e)
			d.Labels = nil
			return d
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := shapeEnv(t)
			e.reconcile("team-a", "training")
			if err := e.client.Update(e.ctx, tt.edit(e)); err != nil {
				t.Fatal(err)
			}
			e.reconcile("team-a", "training")
			checkShapes(t, e)
		})
	}
}

// cacheLikeEnv is shapeEnv with a controller that reads as through the manager's cache
// (useCacheLike).
func cacheLikeEnv(t *testing.T) *testEnv {
	e := shapeEnv(t)
	e.useCacheLike(e.client)
	return e
}

// TestPutBackUnlabelled: an object whose label was removed, so that the manager's cache no
// longer holds it, is read from the API server and put back (it used to fail every reconcile
// of its domain with AlreadyExists): the channel template while the domain still owns it, the
// daemon objects (named after the domain's UID) also without an owner.
func TestPutBackUnlabelled(t *testing.T) {
	for _, tc := range []struct {
		obj         client.Object
		removeOwner bool
	}{
		{contractChannelTemplate(), false},
		{contractDaemonTemplate(), true},
		{contractDaemonSet(), true},
	} {
		t.Run(fmt.Sprintf("%T %s", tc.obj, tc.obj.GetName()), func(t *testing.T) {
			e := cacheLikeEnv(t)
			e.reconcile("team-a", "training")
			e.get(tc.obj)
			tc.obj.SetLabels(nil)
			if tc.removeOwner {
				tc.obj.SetOwnerReferences(nil)
			}
			if err := e.client.Update(e.ctx, tc.obj); err != nil {
				t.Fatal(err)
			}
			e.reconcile("team-a", "training")
			checkShapes(t, e)
		})
	}
}

// TestLeavesAStrangersTemplate: a claim template of the channel template's name with neither
// the domain's label nor an owner (a user's own) is not taken over: the reconcile fails naming
// it and what to do, and the template is unchanged.
func TestLeavesAStrangersTemplate(t *testing.T) {
	e := cacheLikeEnv(t)
	theirs := contractChannelTemplate()
	theirs.Labels, theirs.OwnerReferences = nil, nil
	theirs.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gpu.nvidia.com"
	if err := e.client.Create(e.ctx, theirs); err != nil {
		t.Fatal(err)
	}
	_, err := e.ctrl.Reconcile(e.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "training"}})
	if err == nil || !strings.Contains(err.Error(), "team-a/training-channel") || !strings.Contains(err.Error(), "rename spec.channel.resourceClaimTemplate.name") {
		t.Errorf("reconcile with a stranger's template in the way: %v, want an error naming it and what to do", err)
	}
	got := contractChannelTemplate()
	e.get(got)
	if diff := cmp.Diff(theirs, got, ignoreServerFields()); diff != "" {
		t.Errorf("the stranger's template changed (-theirs +now):\n%s", diff)
	}
}

// TestKeepsServerDefaults: templates as the API server stores them, with the allocation mode
// and count it defaults, are what the controller wants: a second reconcile deletes none of them
// (it used to replace both on every reconcile, a hot loop against a real API server).
func TestKeepsServerDefaults(t *testing.T) {
	deletes := 0
	funcs := &interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		if _, ok := obj.(*resourcev1.ResourceClaimTemplate); ok {
			deletes++
		}
		return c.Delete(ctx, obj, opts...)
	}}
	cd := newDomain("training", shapeUID, 2, "training-channel")
	e := newEnv(t, funcs, cd, newNode("a-0"), newSlice("a-0", cliqueA), newNode("a-1"), newSlice("a-1", cliqueA))
	e.reconcile("team-a", "training")
	for _, tmpl := range []*resourcev1.ResourceClaimTemplate{contractChannelTemplate(), contractDaemonTemplate()} {
		e.get(tmpl)
		r := tmpl.Spec.Spec.Devices.Requests[0].Exactly
		r.AllocationMode, r.Count = resourcev1.DeviceAllocationModeExactCount, 1 // the API server's defaults
		if err := e.client.Update(e.ctx, tmpl); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile("team-a", "training")
	if deletes != 0 {
		t.Errorf("the second reconcile deleted %d claim templates, want none", deletes)
	}
}

// TestForeignTemplate: a channel template of the domain's name that another object controls
// is left alone, and the reconcile fails saying so.
func TestForeignTemplate(t *testing.T) {
	foreign := contractChannelTemplate()
	foreign.Labels = nil
	foreign.OwnerReferences[0].UID = "someone-else"
	cd := newDomain("training", shapeUID, 1, "training-channel")
	e := newEnv(t, nil, cd, foreign, newNode("a-0"), newSlice("a-0", cliqueA))
	_, err := e.ctrl.Reconcile(e.ctx, requestFor(cd))
	if err == nil {
		t.Fatal("reconciled a domain whose channel template another object controls, want an error")
	}
	got := contractChannelTemplate()
	e.get(got)
	if diff := cmp.Diff(foreign, got, ignoreServerFields()); diff != "" {
		t.Errorf("the foreign template changed (-before +after):\n%s", diff)
	}
}
