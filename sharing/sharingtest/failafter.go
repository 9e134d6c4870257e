package sharingtest

import "fmt"

// FailAfter makes the call with this exact description (as Calls lists it, e.g.
// "SetTimeSlice GPU-1 2") make its change and then return err, as a command does that applied
// the change and then exited non-zero or was killed at its context's deadline; a nil err
// removes the failure. It applies to the calls that change the host (SetTimeSlice,
// SetComputeMode, Start, Stop, Mount, Unmount); FailOn fails a call before it changes anything.
func (f *FakeHost) FailAfter(call string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.failAfter, call)
		return
	}
	if f.failAfter == nil {
		f.failAfter = map[string]error{}
	}
	f.failAfter[call] = err
}

// after ends a changing call whose change returned err: err when the change failed, else the
// error FailAfter set for the call, if any.
func (f *FakeHost) after(err error, format string, args ...any) error {
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failAfter[fmt.Sprintf(format, args...)]
}
