package controller

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kept says whether a cache restricted by byObject holds obj.
func kept(byObject map[client.Object]cache.ByObject, obj client.Object) bool {
	for typ, by := range byObject {
		if reflect.TypeOf(typ) != reflect.TypeOf(obj) {
			continue
		}
		if len(by.Namespaces) > 0 {
			if _, ok := by.Namespaces[obj.GetNamespace()]; !ok {
				return false
			}
		}
		return by.Label == nil || by.Label.Matches(labels.Set(obj.GetLabels()))
	}
	return true
}

// TestCacheByObject: the restricted cache keeps every object the controller makes or reads
// (made ones from the controller's own builders) and drops pods and DaemonSets of others.
func TestCacheByObject(t *testing.T) {
	byObject, err := CacheByObject(driverNS)
	if err != nil {
		t.Fatal(err)
	}
	cd := withStatus(newDomain("training", shapeUID, 1, "training-channel"), cliqueA)
	pod := driverPod()
	ds := daemonSet(cd, driverNS, &pod)
	// A pod the DaemonSet controller makes: the template's labels, the DaemonSet's namespace.
	madePod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-x7k2p", Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels}}
	foreignPod := daemonPod(shapeUID, "n1", "Running")
	foreignPod.Namespace = "team-a"
	unlabelledPod := daemonPod(shapeUID, "n1", "Running")
	unlabelledPod.Labels = nil
	tests := []struct {
		name string
		obj  client.Object
		want bool
	}{
		{"channel template", channelTemplate(cd), true},
		{"daemon template", daemonTemplate(cd, driverNS), true},
		{"daemon DaemonSet", ds, true},
		{"daemon pod", madePod, true},
		{"node", newNode("n1"), true},
		{"slice", newSlice("n1", cliqueA), true},
		{"a pod in another namespace", foreignPod, false},
		{"a pod without the label", unlabelledPod, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kept(byObject, tt.obj); got != tt.want {
				t.Errorf("cache keeps %s/%s: %v, want %v", tt.obj.GetNamespace(), tt.obj.GetName(), got, tt.want)
			}
		})
	}
}
