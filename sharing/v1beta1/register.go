package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion returns the group and version of this package.
func GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: GroupName, Version: Version}
}

// AddToScheme registers GpuConfig and MigDeviceConfig, with their defaulting functions, in s.
func AddToScheme(s *runtime.Scheme) error {
	gv := GroupVersion()
	s.AddKnownTypes(gv, &GpuConfig{}, &MigDeviceConfig{})
	s.AddTypeDefaultingFunc(&GpuConfig{}, func(o any) { o.(*GpuConfig).Default() })
	s.AddTypeDefaultingFunc(&MigDeviceConfig{}, func(o any) { o.(*MigDeviceConfig).Default() })
	return nil
}

// NewScheme returns a new scheme holding only the kinds of this package.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	// AddToScheme cannot fail: it only adds two distinct kinds to an empty scheme.
	_ = AddToScheme(s)
	return s
}
