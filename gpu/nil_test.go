package gpu_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu"
)

// TestNilArguments: the exported entry points given a nil NVML return an error instead of
// panicking.
func TestNilArguments(t *testing.T) {
	calls := map[string]func() error{
		"Enumerate": func() error { _, err := gpu.Enumerate(context.Background(), nil); return err },
		"Open":      func() error { _, err := gpu.Open(nil); return err },
	}
	if diff := cmp.Diff(allErrors(calls), outcomes(calls)); diff != "" {
		t.Errorf("outcome per call (-want +got):\n%s", diff)
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
