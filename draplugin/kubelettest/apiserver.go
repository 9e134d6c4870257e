package kubelettest

import (
	"fmt"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// SliceFilter turns the ResourceSlice a client writes into the one the fake API server stores,
// as an API server drops the fields of features whose gates are off.
type SliceFilter func(*resourceapi.ResourceSlice) *resourceapi.ResourceSlice

// NewFakeClient is NewAPIClient storing every ResourceSlice as written: an API server with
// every feature of the ResourceSlice API on. A plugin's Start also needs the Node object among
// objs.
func NewFakeClient(objs ...runtime.Object) *fake.Clientset { return NewAPIClient(nil, objs...) }

// NewAPIClient returns a fake API client holding objs that answers as a Kubernetes API server:
//
//   - discovery serves resource.k8s.io/v1 with resourceslices and resourceclaims;
//   - ResourceSlice creates and updates store filter's copy of the slice (nil: the slice as
//     written), without an error; a dry run (DryRun: All) returns the object as it would be
//     stored and stores nothing;
//   - generateName is honoured, as the ResourceSlice controller of the kubelet-plugin helper
//     needs.
//
// It is client-go's simple clientset otherwise (no server-side apply, no validation).
func NewAPIClient(filter SliceFilter, objs ...runtime.Object) *fake.Clientset {
	client := fake.NewSimpleClientset(objs...)
	verbs := metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	client.Resources = []*metav1.APIResourceList{{
		GroupVersion: resourceapi.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{
			{Name: "resourceslices", Kind: "ResourceSlice", Verbs: verbs},
			{Name: "resourceclaims", Namespaced: true, Kind: "ResourceClaim", Verbs: verbs},
		},
	}}
	if filter == nil {
		filter = (*resourceapi.ResourceSlice).DeepCopy
	}
	s := &sliceServer{tracker: client.Tracker(), filter: filter}
	client.PrependReactor("create", "resourceslices", s.create)
	client.PrependReactor("update", "resourceslices", s.update)
	return client
}

// sliceServer writes ResourceSlices through a filter.
type sliceServer struct {
	tracker k8stesting.ObjectTracker
	filter  SliceFilter
	mu      sync.Mutex
	seq     int
}

func (s *sliceServer) create(a k8stesting.Action) (bool, runtime.Object, error) {
	ca, ok := a.(k8stesting.CreateActionImpl)
	if !ok || ca.GetSubresource() != "" {
		return false, nil, nil
	}
	in, ok := ca.GetObject().(*resourceapi.ResourceSlice)
	if !ok {
		return true, nil, fmt.Errorf("create resourceslices: got a %T", ca.GetObject())
	}
	out := s.filter(in)
	if out.Name == "" && out.GenerateName != "" {
		s.mu.Lock()
		s.seq++
		out.Name = fmt.Sprintf("%s%05d", out.GenerateName, s.seq)
		s.mu.Unlock()
	}
	if slices.Contains(ca.CreateOptions.DryRun, metav1.DryRunAll) {
		return true, out, nil
	}
	if err := s.tracker.Create(ca.GetResource(), out, "", ca.CreateOptions); err != nil {
		return true, nil, err
	}
	stored, err := s.tracker.Get(ca.GetResource(), "", out.Name)
	return true, stored, err
}

func (s *sliceServer) update(a k8stesting.Action) (bool, runtime.Object, error) {
	ua, ok := a.(k8stesting.UpdateActionImpl)
	if !ok || ua.GetSubresource() != "" {
		return false, nil, nil
	}
	in, ok := ua.GetObject().(*resourceapi.ResourceSlice)
	if !ok {
		return true, nil, fmt.Errorf("update resourceslices: got a %T", ua.GetObject())
	}
	out := s.filter(in)
	if slices.Contains(ua.UpdateOptions.DryRun, metav1.DryRunAll) {
		return true, out, nil
	}
	if err := s.tracker.Update(ua.GetResource(), out, "", ua.UpdateOptions); err != nil {
		return true, nil, err
	}
	stored, err := s.tracker.Get(ua.GetResource(), "", out.Name)
	return true, stored, err
}
