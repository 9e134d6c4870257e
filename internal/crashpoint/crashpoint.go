// Package crashpoint passes the crash points of the plugins' operations to the tests' hooks
// (package draplugin/testhooks) and marks the errors they return, which stop an operation at
// once, without cleanup, as a crash would.
package crashpoint

import (
	"errors"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// crashError marks an error of a test's crash hook: the operation stops at once, without any
// cleanup, as a crash would.
type crashError struct{ err error }

func (e *crashError) Error() string { return e.err.Error() }
func (e *crashError) Unwrap() error { return e.err }

// At calls the test's crash hook (hooks.AfterStep), when there is one, at a point of an
// operation on a claim. An error of the hook comes back marked as a crash (IsCrash): the caller
// returns it at once, without cleanup.
func At(hooks testhooks.Hooks, point testhooks.CrashPoint, uid types.UID) error {
	if hooks.AfterStep == nil {
		return nil
	}
	if err := hooks.AfterStep(point, uid); err != nil {
		return &crashError{err}
	}
	return nil
}

// IsCrash reports whether err is, or wraps, the error of a crash hook (At).
func IsCrash(err error) bool {
	var c *crashError
	return errors.As(err, &c)
}
