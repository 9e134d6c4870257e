package selectors

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// ExtendedResourceClass returns a DeviceClass that serves pods asking for an extended resource
// (spec.extendedResourceName, KEP-5004, GA in Kubernetes 1.37): a container with
// resources.limits[resourceName]: N and no claim gets N devices of the class, allocated by the
// scheduler in a ResourceClaim it creates for the pod. The class selects the devices expression
// selects; configs become the class's spec.config, applied to every device allocated through it.
//
// The API server accepts two classes with the same extendedResourceName (the one created last
// wins), so keep one class per name in a cluster. On a node whose status.allocatable has the
// resource (a device plugin advertises it), the scheduler serves the resource from the device
// plugin, not from the class.
func ExtendedResourceClass(name string, resourceName corev1.ResourceName, expression string, configs ...resourceapi.DeviceClassConfiguration) (*resourceapi.DeviceClass, error) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("DeviceClass name %q: %s", name, strings.Join(errs, "; "))
	}
	if err := ValidateExtendedResourceName(resourceName); err != nil {
		return nil, fmt.Errorf("DeviceClass %s: %w", name, err)
	}
	if _, err := NewCompiler().Compile(expression); err != nil {
		return nil, fmt.Errorf("DeviceClass %s: selector: %w", name, err)
	}
	c := deviceClass(name, expression)
	c.Spec.ExtendedResourceName = ptr.To(string(resourceName))
	c.Spec.Config = configs
	return c, nil
}

// ValidateExtendedResourceName checks a name as the API server checks a DeviceClass's
// spec.extendedResourceName and a container's extended resource: a domain-prefixed name
// ("nvidia.com/gpu") outside the kubernetes.io domains, which stays a qualified name with the
// "requests." prefix resource quotas add.
func ValidateExtendedResourceName(name corev1.ResourceName) error {
	s := string(name)
	domain, _, prefixed := strings.Cut(s, "/")
	switch {
	case !prefixed:
		return fmt.Errorf("extendedResourceName %q: an extended resource name needs a domain prefix, e.g. nvidia.com/gpu", s)
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
		return fmt.Errorf("extendedResourceName %q: the kubernetes.io domains are reserved for native resources", s)
	case strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix):
		return fmt.Errorf("extendedResourceName %q: the %q prefix is reserved for resource quotas", s, corev1.DefaultResourceRequestsPrefix)
	}
	if errs := validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix + s); len(errs) > 0 {
		return fmt.Errorf("extendedResourceName %q: %w", s, errors.New(strings.Join(errs, "; ")))
	}
	return nil
}
