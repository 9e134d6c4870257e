// Package sharingtest provides FakeHost, an in-memory host for package sharing: it implements
// TimeSlicer, ComputeModeSetter and MPSDaemons, keeps the resulting host state, records every
// call, and can be told to fail a call.
package sharingtest
