package cdi_test

import (
	"testing"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/internal/nilcheck"
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
	nilcheck.ErrorsOnly(t, calls)
}
