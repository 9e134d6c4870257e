//go:build !linux

package sharing

import (
	"context"
	"fmt"
)

// TmpfsMounter is the Mounter of a real host; it works on Linux only.
type TmpfsMounter struct{}

var _ Mounter = (*TmpfsMounter)(nil)

// NewTmpfsMounter returns a Mounter that mounts tmpfs file systems (on Linux).
func NewTmpfsMounter() *TmpfsMounter { return &TmpfsMounter{} }

// Mount implements Mounter: it fails, tmpfs mounts need Linux.
func (*TmpfsMounter) Mount(_ context.Context, target string, _ int64) error {
	return fmt.Errorf("tmpfs on %s: tmpfs mounts are only supported on Linux", target)
}

// Unmount implements Mounter: it fails, tmpfs mounts need Linux.
func (*TmpfsMounter) Unmount(_ context.Context, target string) error {
	return fmt.Errorf("unmount %s: tmpfs mounts are only supported on Linux", target)
}
