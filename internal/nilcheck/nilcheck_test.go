package nilcheck

import (
	"errors"
	"fmt"
	"testing"
)

// TestOutcome: the three outcomes ErrorsOnly tells apart.
func TestOutcome(t *testing.T) {
	for want, call := range map[string]func() error{
		"error":            func() error { return errors.New("nil model") },
		"no error":         func() error { return nil },
		"panic: nil deref": func() error { panic("nil deref") },
	} {
		if got := Outcome(call); got != want {
			t.Errorf("outcome = %q, want %q", got, want)
		}
	}
}

// Example shows the outcomes a TestNilArguments tells apart: only "error" passes.
func Example() {
	fmt.Println(Outcome(func() error { return errors.New("Open: nil NVML") }))
	fmt.Println(Outcome(func() error { return nil }))
	fmt.Println(Outcome(func() error { panic("nil model") }))
	// Output:
	// error
	// no error
	// panic: nil model
}
