package check

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/lint"
)

// CheckerOption configures a Checker.
type CheckerOption func(*Checker)

// WithCompiler compiles with c, for its cost limit, cache and CEL features (default: a
// Compiler with the CEL features the allocator features imply, CELFeatures). Give it the CEL
// features of WithFeatures' allocator features, or selectors compile in another environment
// than the allocator evaluates them in.
func WithCompiler(c *selectors.Compiler) CheckerOption {
	return func(k *Checker) { k.env.Compiler = c }
}

// WithFeatures replaces DefaultFeatures: the features of the allocator that allocates the
// claims, and, without WithCompiler, the CEL features selectors compile with (CELFeatures).
func WithFeatures(f structured.Features) CheckerOption {
	return func(k *Checker) { k.features = &f }
}

// WithDriverName sets the DRA driver (and attribute domain) the manifests are written for
// (default gpudra.DefaultDriverName).
func WithDriverName(name string) CheckerOption { return func(k *Checker) { k.env.DriverName = name } }

// WithMachine sets the target machine: the ResourceSlices of one node (or of a cluster), and a
// name for messages. Without it, Check lints but does not allocate.
func WithMachine(name string, slices []*resourceapi.ResourceSlice) CheckerOption {
	return func(k *Checker) { k.env.Machine, k.env.Slices = name, slices }
}

// WithDeviceClasses adds DeviceClasses that exist in the cluster besides those in the
// manifests (the driver's own are always known).
func WithDeviceClasses(classes ...*resourceapi.DeviceClass) CheckerOption {
	return func(k *Checker) { k.env.DeviceClasses = append(k.env.DeviceClasses, classes...) }
}

// WithPolicy makes Check evaluate a policy.
func WithPolicy(p *lint.Policy) CheckerOption { return func(k *Checker) { k.policy = p } }

// WithNamespace is the namespace of objects that do not name one (default "default").
func WithNamespace(ns string) CheckerOption { return func(k *Checker) { k.env.Namespace = ns } }

// WithAPIVersions declares apiVersions the target cluster serves beyond those a default
// Kubernetes v1.37 API server serves (every stable version of its built-in groups), for
// example resource.k8s.io/v1beta2 or a CRD's group version (the ComputeDomain kind of
// resource.nvidia.com/v1beta1 is served without it: the driver's own CRD). Objects of other
// apiVersions are error findings (finding.RuleNotServed). Check them first with ParseAPIVersions.
func WithAPIVersions(gvs ...schema.GroupVersion) CheckerOption {
	return func(k *Checker) { k.apiVersions = append(k.apiVersions, gvs...) }
}
