package check

import (
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/simulate"
)

// DefaultFeatures are the allocator features of a Kubernetes 1.37 scheduler with its default
// feature gates (GA and beta-on), as simulate.DefaultFeatures lists them: a Checker allocates
// with them unless WithFeatures says otherwise.
func DefaultFeatures() structured.Features { return simulate.DefaultFeatures() }

// CELFeatures are the CEL features an allocator with features f compiles selectors with:
// ConsumableCapacity adds device.allowMultipleAllocations, ListTypeAttributes adds list-valued
// attributes and includes(). CELFeatures(DefaultFeatures()) are the CEL features of
// selectors.NewCompiler().
func CELFeatures(f structured.Features) dracel.Features {
	return dracel.Features{
		EnableConsumableCapacity: f.ConsumableCapacity,
		EnableListTypeAttributes: f.ListTypeAttributes,
	}
}
