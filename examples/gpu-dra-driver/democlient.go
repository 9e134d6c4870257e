package main

import (
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	fakecorev1 "k8s.io/client-go/kubernetes/typed/core/v1/fake"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	fakeresourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1/fake"
	resourcev1beta1 "k8s.io/client-go/kubernetes/typed/resource/v1beta1"
	fakeresourcev1beta1 "k8s.io/client-go/kubernetes/typed/resource/v1beta1/fake"
	resourcev1beta2 "k8s.io/client-go/kubernetes/typed/resource/v1beta2"
	fakeresourcev1beta2 "k8s.io/client-go/kubernetes/typed/resource/v1beta2/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
)

// demoClient is the API server of `demo`: an in-memory object tracker behind the typed clients
// of the API groups a kubelet plugin uses (core/v1 for its Node; resource.k8s.io, whose claims
// the kubelet-plugin helper reads through every served version). Any other group answers an
// error naming what is served.
//
// It is not client-go's fake.Clientset: that one links a typed fake of every API group into
// the binary (about 6 MB of code, with its type data and function tables) and registers every
// group in a scheme of its own at package initialization, in every process of this binary,
// `serve` included (issue 33).
type demoClient struct {
	kubernetes.Interface
	fake *clienttesting.Fake
}

var _ kubernetes.Interface = (*demoClient)(nil)

// errDemoAPI is what the demo's API server answers for the groups it does not serve.
var errDemoAPI = errors.New("the demo's in-memory API server serves only core/v1 and resource.k8s.io")

// refuse is the transport of the groups the demo does not serve.
type refuse struct{}

func (refuse) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, errDemoAPI)
}

// newDemoClient returns a demo API server holding objs.
func newDemoClient(objs ...runtime.Object) (*demoClient, error) {
	tracker := clienttesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder())
	for _, o := range objs {
		if err := tracker.Add(o); err != nil {
			return nil, fmt.Errorf("demo API server: add %T: %w", o, err)
		}
	}
	others, err := kubernetes.NewForConfigAndClient(&rest.Config{Host: "demo.invalid"}, &http.Client{Transport: refuse{}})
	if err != nil {
		return nil, fmt.Errorf("demo API server: %w", err)
	}
	f := &clienttesting.Fake{}
	f.AddReactor("*", "*", clienttesting.ObjectReaction(tracker))
	f.AddWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w, err := tracker.Watch(a.GetResource(), a.GetNamespace())
		return true, w, err
	})
	return &demoClient{Interface: others, fake: f}, nil
}

// CoreV1 serves core/v1 from the tracker.
func (c *demoClient) CoreV1() corev1.CoreV1Interface { return &fakecorev1.FakeCoreV1{Fake: c.fake} }

// ResourceV1 serves resource.k8s.io/v1 from the tracker.
func (c *demoClient) ResourceV1() resourcev1.ResourceV1Interface {
	return &fakeresourcev1.FakeResourceV1{Fake: c.fake}
}

// ResourceV1beta1 serves resource.k8s.io/v1beta1 from the tracker.
func (c *demoClient) ResourceV1beta1() resourcev1beta1.ResourceV1beta1Interface {
	return &fakeresourcev1beta1.FakeResourceV1beta1{Fake: c.fake}
}

// ResourceV1beta2 serves resource.k8s.io/v1beta2 from the tracker.
func (c *demoClient) ResourceV1beta2() resourcev1beta2.ResourceV1beta2Interface {
	return &fakeresourcev1beta2.FakeResourceV1beta2{Fake: c.fake}
}
