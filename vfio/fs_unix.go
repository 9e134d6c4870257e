//go:build unix

package vfio

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CharDevice implements FS with stat(2).
func (OSFS) CharDevice(name string) (major, minor int64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		return 0, 0, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return 0, 0, fmt.Errorf("%s is not a character device", name)
	}
	dev := uint64(st.Rdev) //nolint:unconvert // Rdev is not uint64 on every platform.
	return int64(unix.Major(dev)), int64(unix.Minor(dev)), nil
}
