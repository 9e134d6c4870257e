package controller

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain"
)

// CacheByObject keeps a manager's cache of pods, DaemonSets and claim templates to the ones
// the controller makes and reads: those with the NodeLabel label, pods and DaemonSets only in
// the driver's namespace. Without it the cache holds every pod of the cluster. Pass it as
// ctrl.Options{Cache: cache.Options{ByObject: ...}}, when nothing else in the manager needs
// other pods, DaemonSets or claim templates.
func CacheByObject(driverNamespace string) (map[client.Object]cache.ByObject, error) {
	labelled, err := labels.NewRequirement(computedomain.NodeLabel, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("selector of label %s: %w", computedomain.NodeLabel, err)
	}
	sel := labels.NewSelector().Add(*labelled)
	inDriverNS := map[string]cache.Config{driverNamespace: {}}
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:                       {Namespaces: inDriverNS, Label: sel},
		&appsv1.DaemonSet{}:                 {Namespaces: inDriverNS, Label: sel},
		&resourcev1.ResourceClaimTemplate{}: {Label: sel},
	}, nil
}
