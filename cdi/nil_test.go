package cdi_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/cdi"
)

// TestNilArguments: the exported entry points given a nil root, installation or spec return an
// error instead of panicking.
func TestNilArguments(t *testing.T) {
	w, err := cdi.NewWriter(cdi.WithSpecDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"Discover":     func() error { _, err := cdi.Discover(nil); return err },
		"NewGenerator": func() error { _, err := cdi.NewGenerator(nil); return err },
		"Validate":     func() error { return cdi.Validate(nil) },
		"Writer.Write": func() error { _, err := w.Write(nil); return err },
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
