package topology_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/topology"
)

// TestNilArguments: the exported entry points given a nil topology or NVML return an error
// instead of panicking.
func TestNilArguments(t *testing.T) {
	calls := map[string]func() error{
		"BestSet":  func() error { _, err := topology.BestSet(nil, 2, nil); return err },
		"Discover": func() error { _, err := topology.Discover(nil); return err },
	}
	if diff := cmp.Diff(allErrors(calls), outcomes(calls)); diff != "" {
		t.Errorf("outcome per call (-want +got):\n%s", diff)
	}
	if got := topology.Render(nil); got != "" {
		t.Errorf("Render(nil) = %q, want nothing", got)
	}
}

// outcomes calls each function and says whether it returned an error, returned nil or panicked.
func outcomes(calls map[string]func() error) map[string]string {
	out := map[string]string{}
	for name, call := range calls {
		out[name] = outcome(call)
	}
	return out
}

func outcome(call func() error) (result string) {
	defer func() {
		if r := recover(); r != nil {
			result = fmt.Sprintf("panic: %v", r)
		}
	}()
	if err := call(); err != nil {
		return "error"
	}
	return "no error"
}

func allErrors(calls map[string]func() error) map[string]string {
	out := map[string]string{}
	for name := range calls {
		out[name] = "error"
	}
	return out
}
