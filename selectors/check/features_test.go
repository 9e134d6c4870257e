package check_test

import (
	"testing"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/check"
	"github.com/gpudra/gpudra/simulate"
)

// TestDefaultFeaturesAgree: the core compiles with the CEL features the allocator's default
// features imply, so a selector that compiles is evaluated by Check's allocator in the same
// environment.
func TestDefaultFeaturesAgree(t *testing.T) {
	if got, want := check.DefaultFeatures(), simulate.DefaultFeatures(); got != want {
		t.Errorf("DefaultFeatures() = %+v, simulate.DefaultFeatures() = %+v", got, want)
	}
	if got, want := selectors.NewCompiler().CELFeatures(), check.CELFeatures(check.DefaultFeatures()); got != want {
		t.Errorf("selectors.NewCompiler().CELFeatures() = %+v, CELFeatures(DefaultFeatures()) = %+v", got, want)
	}
}
