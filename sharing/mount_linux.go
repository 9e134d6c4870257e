package sharing

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// TmpfsMounter is the Mounter of a real host: it calls mount(2) and umount(2), which need
// CAP_SYS_ADMIN (the plugin's container runs privileged).
type TmpfsMounter struct{}

var _ Mounter = (*TmpfsMounter)(nil)

// NewTmpfsMounter returns a Mounter that mounts tmpfs file systems.
func NewTmpfsMounter() *TmpfsMounter { return &TmpfsMounter{} }

// Mount implements Mounter.
func (*TmpfsMounter) Mount(ctx context.Context, target string, sizeBytes int64) error {
	if sizeBytes <= 0 {
		return fmt.Errorf("tmpfs on %s: size %d bytes: the size must be positive", target, sizeBytes)
	}
	mounted, err := isMountPoint(target)
	if err != nil {
		return err
	}
	if mounted {
		klog.FromContext(ctx).V(4).Info("Already a mount point", "target", target)
		return nil
	}
	data := fmt.Sprintf("size=%d,mode=1777", sizeBytes)
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		return fmt.Errorf("mount tmpfs (%s) on %s: %w", data, target, err)
	}
	klog.FromContext(ctx).V(4).Info("Mounted tmpfs", "target", target, "sizeBytes", sizeBytes)
	return nil
}

// Unmount implements Mounter.
func (*TmpfsMounter) Unmount(ctx context.Context, target string) error {
	mounted, err := isMountPoint(target)
	if errors.Is(err, unix.ENOENT) || (err == nil && !mounted) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := unix.Unmount(target, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	klog.FromContext(ctx).V(4).Info("Unmounted", "target", target)
	return nil
}

// isMountPoint says whether path is the root of a file system other than its parent's.
func isMountPoint(path string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Lstat(filepath.Dir(filepath.Clean(path)), &parent); err != nil {
		return false, fmt.Errorf("stat %s: %w", filepath.Dir(path), err)
	}
	return st.Dev != parent.Dev, nil
}
