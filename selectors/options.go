package selectors

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpudra/gpudra"
)

// Environment is what manifests are linted and evaluated against: the driver they are written
// for, the target machine, the cluster's DeviceClasses and the namespace they go into. The zero
// Environment is the default driver, no machine, and namespace "default".
type Environment struct {
	// Compiler compiles selectors; nil means NewCompiler().
	Compiler *Compiler
	// DriverName is the DRA driver (and attribute domain); "" means gpudra.DefaultDriverName.
	DriverName string
	// Machine names the target machine in messages.
	Machine string
	// Slices are the ResourceSlices of the target machine (one node, or a cluster's nodes);
	// nil means there is no machine to check against.
	Slices []*resourceapi.ResourceSlice
	// DeviceClasses exist in the cluster besides those of the manifests; the driver's own
	// (DeviceClasses(DriverName)) are always known.
	DeviceClasses []*resourceapi.DeviceClass
	// Namespace is where objects that name none go, as kubectl apply -n puts them; "" means
	// "default".
	Namespace string
}

// withDefaults fills in the defaults of the zero fields.
func (e Environment) withDefaults() Environment {
	if e.Compiler == nil {
		e.Compiler = NewCompiler()
	}
	if e.DriverName == "" {
		e.DriverName = gpudra.DefaultDriverName
	}
	if e.Namespace == "" {
		e.Namespace = "default"
	}
	return e
}

// CheckerOption configures a Checker.
type CheckerOption func(*Checker)

// WithCompiler compiles with c (default: NewCompiler()), for its features and cost limit.
func WithCompiler(c *Compiler) CheckerOption { return func(k *Checker) { k.env.Compiler = c } }

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
func WithPolicy(p *Policy) CheckerOption { return func(k *Checker) { k.policy = p } }

// WithNamespace is the namespace of objects that do not name one (default "default").
func WithNamespace(ns string) CheckerOption { return func(k *Checker) { k.env.Namespace = ns } }

// WithAPIVersions declares apiVersions the target cluster serves beyond those a default
// Kubernetes v1.37 API server serves (every stable version of its built-in groups), for
// example resource.k8s.io/v1beta2 or a CRD's resource.nvidia.com/v1beta1. Objects of other
// apiVersions are error findings (RuleNotServed). Check them first with ParseAPIVersions.
func WithAPIVersions(gvs ...schema.GroupVersion) CheckerOption {
	return func(k *Checker) { k.apiVersions = append(k.apiVersions, gvs...) }
}
