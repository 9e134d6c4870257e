//go:build unix

package cdi

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func statDeviceNode(p string) (NodeInfo, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return NodeInfo{}, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return NodeInfo{}, fmt.Errorf("device node %s: %w", p, errNotDevice)
	}
	dev := uint64(st.Rdev) //nolint:unconvert // Rdev is not uint64 on every platform.
	return NodeInfo{
		Type:  typ,
		Major: int64(unix.Major(dev)),
		Minor: int64(unix.Minor(dev)),
		Mode:  os.FileMode(st.Mode & 0o777),
	}, nil
}
