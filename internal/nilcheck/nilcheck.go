package nilcheck

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ErrorsOnly calls each function (by name) and fails t, with a diff, for every call that
// returned no error or panicked.
func ErrorsOnly(t testing.TB, calls map[string]func() error) {
	t.Helper()
	want, got := map[string]string{}, map[string]string{}
	for name, call := range calls {
		want[name], got[name] = "error", Outcome(call)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcome per call (-want +got):\n%s", diff)
	}
}

// Outcome says whether call returned an error, returned nil or panicked.
func Outcome(call func() error) (result string) {
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
