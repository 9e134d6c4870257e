package selectors_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/selectors"
)

// TestValidateExtendedResourceName: the rules of the API server's DeviceClass validation
// (spec.extendedResourceName must be an extended resource name, as for a container).
func TestValidateExtendedResourceName(t *testing.T) {
	cases := []struct {
		name corev1.ResourceName
		err  string // "" when valid
	}{
		{name: "nvidia.com/gpu"},
		{name: "nvidia.com/gpu.shared"},
		{name: "nvidia.com/mig-1g.10gb.me"},
		{name: "example.com/a_b-c.d"},
		{name: "gpu", err: "needs a domain prefix"},
		{name: "kubernetes.io/gpu", err: "reserved for native resources"},
		{name: "node.kubernetes.io/gpu", err: "reserved for native resources"},
		{name: "requests.nvidia.com/gpu", err: "reserved for resource quotas"},
		{name: "nvidia.com/mig-1g.10gb+me", err: "nvidia.com/mig-1g.10gb+me"},
		{name: "nvidia.com/", err: "nvidia.com/"},
		{name: "nvidia.com/" + corev1.ResourceName(strings.Repeat("g", 64)), err: "63"},
	}
	for _, tc := range cases {
		err := selectors.ValidateExtendedResourceName(tc.name)
		if tc.err == "" && err != nil {
			t.Errorf("%s: %v, want valid", tc.name, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.err)
		}
	}
}

func TestExtendedResourceClass(t *testing.T) {
	cfg := resourceapi.DeviceClassConfiguration{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.nvidia.com"}}}
	c, err := selectors.ExtendedResourceClass("gpu.extended.nvidia.com", "nvidia.com/gpu", selectors.For("").GPU(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != "DeviceClass" || c.APIVersion != "resource.k8s.io/v1" || *c.Spec.ExtendedResourceName != "nvidia.com/gpu" ||
		len(c.Spec.Config) != 1 || c.Spec.Selectors[0].CEL.Expression != "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'" {
		t.Errorf("class %+v", c)
	}
	for _, tc := range []struct{ name, resource, expr, err string }{
		{"Gpu.Extended", "nvidia.com/gpu", "true", `DeviceClass name "Gpu.Extended"`},
		{"gpu.extended", "gpu", "true", "domain prefix"},
		{"gpu.extended", "nvidia.com/gpu", "device.driver ==", "selector"},
	} {
		if _, err := selectors.ExtendedResourceClass(tc.name, corev1.ResourceName(tc.resource), tc.expr); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ExtendedResourceClass(%q, %q, %q): %v, want an error containing %q", tc.name, tc.resource, tc.expr, err, tc.err)
		}
	}
}
