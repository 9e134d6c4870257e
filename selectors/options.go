package selectors

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
)

// Option configures a Linter, an Upgrader or a Checker. Each constructor says which options it
// uses; it ignores the others, so one option list can configure all three.
type Option func(*settings)

type settings struct {
	compiler  *Compiler
	driver    string
	machine   string
	slices    []*resourceapi.ResourceSlice
	classes   []*resourceapi.DeviceClass
	policy    *Policy
	namespace string
}

func newSettings(opts []Option) settings {
	s := settings{driver: gpudra.DefaultDriverName, namespace: "default"}
	for _, o := range opts {
		o(&s)
	}
	if s.compiler == nil {
		s.compiler = NewCompiler()
	}
	if s.driver == "" {
		s.driver = gpudra.DefaultDriverName
	}
	return s
}

// WithCompiler compiles with c (default: NewCompiler()), for its features and cost limit.
func WithCompiler(c *Compiler) Option { return func(s *settings) { s.compiler = c } }

// WithDriverName sets the DRA driver (and attribute domain) the manifests are written for
// (default gpudra.DefaultDriverName).
func WithDriverName(name string) Option { return func(s *settings) { s.driver = name } }

// WithMachine sets the target machine: the ResourceSlices of one node (or of a cluster), and a
// name for messages. Lint then checks profiles against its GPUs and selectors against its
// devices; Check allocates on it.
func WithMachine(name string, slices []*resourceapi.ResourceSlice) Option {
	return func(s *settings) { s.machine, s.slices = name, slices }
}

// WithDeviceClasses adds DeviceClasses that exist in the cluster besides those in the
// manifests (the driver's own, DeviceClasses(driver), are always known).
func WithDeviceClasses(classes ...*resourceapi.DeviceClass) Option {
	return func(s *settings) { s.classes = append(s.classes, classes...) }
}

// WithPolicy makes Check evaluate a policy.
func WithPolicy(p *Policy) Option { return func(s *settings) { s.policy = p } }

// WithNamespace is the namespace of objects that do not name one, as kubectl apply -n would
// put them (default "default").
func WithNamespace(ns string) Option { return func(s *settings) { s.namespace = ns } }
