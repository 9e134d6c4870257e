package lint

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/selectors"
)

// Environment is what manifests are linted and evaluated against: the driver they are written
// for, the target machine, the cluster's DeviceClasses and the namespace they go into. The zero
// Environment is the default driver, no machine, and namespace "default".
type Environment struct {
	// Compiler compiles selectors; nil means selectors.NewCompiler().
	Compiler *selectors.Compiler
	// DriverName is the DRA driver (and attribute domain); "" means gpudra.DefaultDriverName.
	DriverName string
	// Machine names the target machine in messages.
	Machine string
	// Slices are the ResourceSlices of the target machine (one node, or a cluster's nodes);
	// nil means there is no machine to check against.
	Slices []*resourceapi.ResourceSlice
	// DeviceClasses exist in the cluster besides those of the manifests; the driver's own
	// (selectors.DeviceClasses(DriverName)) are always known.
	DeviceClasses []*resourceapi.DeviceClass
	// Templates are ResourceClaimTemplates that exist in the cluster besides the manifests',
	// such as those a ComputeDomain's controller makes: pods may name them.
	Templates []*resourceapi.ResourceClaimTemplate
	// Namespace is where objects that name none go, as kubectl apply -n puts them; "" means
	// "default".
	Namespace string
}

// WithDefaults fills in the defaults of the zero fields.
func (e Environment) WithDefaults() Environment {
	if e.Compiler == nil {
		e.Compiler = selectors.NewCompiler()
	}
	if e.DriverName == "" {
		e.DriverName = gpudra.DefaultDriverName
	}
	if e.Namespace == "" {
		e.Namespace = "default"
	}
	return e
}
