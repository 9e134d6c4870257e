//go:build !unix

package vfio

import "fmt"

// CharDevice implements FS: device nodes exist on Unix only.
func (OSFS) CharDevice(name string) (major, minor int64, err error) {
	return 0, 0, fmt.Errorf("%s: device nodes are only supported on Unix", name)
}
