// Package nilcheck is the test helper behind each package's TestNilArguments: every exported
// entry point given nil arguments must return an error, never panic or succeed.
//
//	nilcheck.ErrorsOnly(t, map[string]func() error{
//		"Enumerate": func() error { _, err := nvmlgpu.Enumerate(ctx, nil); return err },
//	})
package nilcheck
