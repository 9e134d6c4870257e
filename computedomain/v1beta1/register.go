package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion returns the group and version of this package.
func GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: GroupName, Version: Version}
}

// Resource returns the group and resource of ComputeDomains ("computedomains").
func Resource() schema.GroupResource {
	return schema.GroupResource{Group: GroupName, Resource: "computedomains"}
}

// AddToScheme registers ComputeDomain and ComputeDomainList, and the opaque configurations
// ComputeDomainChannelConfig and ComputeDomainDaemonConfig, in s.
func AddToScheme(s *runtime.Scheme) error {
	gv := GroupVersion()
	s.AddKnownTypes(gv, &ComputeDomain{}, &ComputeDomainList{}, &ComputeDomainChannelConfig{}, &ComputeDomainDaemonConfig{})
	metav1.AddToGroupVersion(s, gv)
	return nil
}
