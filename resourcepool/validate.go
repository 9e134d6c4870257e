package resourcepool

import (
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ValidateDriverName checks a DRA driver name the way the API server checks a ResourceSlice's
// spec.driver, and the attribute domain the driver name also is: a lowercase DNS subdomain of at
// most 63 characters (e.g. gpu.nvidia.com, accel.example.com).
func ValidateDriverName(name string) error {
	if name == "" {
		return errors.New("driver name is empty (e.g. gpu.nvidia.com)")
	}
	var problems []string
	if len(name) > resourceapi.DriverNameMaxLength {
		problems = append(problems, fmt.Sprintf("must be no more than %d characters", resourceapi.DriverNameMaxLength))
	}
	problems = append(problems, validation.IsDNS1123Subdomain(name)...)
	if len(problems) > 0 {
		return fmt.Errorf("driver name %q: %s (a DRA driver name is a DNS subdomain such as gpu.nvidia.com)", name, strings.Join(problems, "; "))
	}
	return nil
}

// ValidatePoolName checks a pool name the way the API server checks a ResourceSlice's
// spec.pool.name: at most 253 characters, one or more DNS subdomains separated by "/". A node's
// pool is usually named after the node.
func ValidatePoolName(name string) error {
	if name == "" {
		return errors.New("pool name is empty: pass the node name")
	}
	var problems []string
	if len(name) > resourceapi.PoolNameMaxLength {
		problems = append(problems, fmt.Sprintf("must be no more than %d characters", resourceapi.PoolNameMaxLength))
	}
	for _, part := range strings.Split(name, "/") {
		for _, p := range validation.IsDNS1123Subdomain(part) {
			problems = append(problems, fmt.Sprintf("%q: %s", part, p))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("pool name %q: %s (a pool name is one or more DNS subdomains separated by \"/\", usually the node name)", name, strings.Join(problems, "; "))
	}
	return nil
}

// ValidateNodeName checks a node name the way the API server checks a Node's name and a
// ResourceSlice's spec.nodeName: a DNS subdomain (lowercase letters, digits, "-" and ".", at most
// 253 characters).
func ValidateNodeName(name string) error {
	if name == "" {
		return errors.New("node name is empty")
	}
	if problems := validation.IsDNS1123Subdomain(name); len(problems) > 0 {
		return fmt.Errorf("node name %q is not a Kubernetes node name: %s", name, strings.Join(problems, "; "))
	}
	return nil
}
