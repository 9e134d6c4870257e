package kubenode

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/cdi/cditest"
)

// FakeDriverRoot lays out a fake NVIDIA driver installation in dir for gpus GPUs, as the
// reference driver's CDI specs expect one (cditest's layout: libraries, binaries, firmware,
// /proc/driver files, MIG capability minors), with real character-device nodes under dir/dev
// carrying the NVIDIA majors and minors. The specs name paths below dir, so containers get
// them bind-mounted for real. Opening a node fails (ENXIO: no NVIDIA kernel module); its
// presence and numbers are what a container is checked for. It needs root (mknod).
func FakeDriverRoot(dir string, gpus int) error {
	root, err := cditest.Build(dir, cditest.Layout{GPUs: gpus, CapsNodes: true, HostDriverRoot: dir})
	if err != nil {
		return fmt.Errorf("fake driver root in %s: %w", dir, err)
	}
	devDir := filepath.Join(dir, "dev")
	return filepath.WalkDir(devDir, func(full string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil {
			return err
		}
		info, err := root.DeviceNode("/" + rel)
		if err != nil {
			return fmt.Errorf("fake driver root: %s has no device numbers: %w", full, err)
		}
		if err := os.Remove(full); err != nil {
			return err
		}
		mode := uint32(unix.S_IFCHR) | uint32(info.Mode.Perm())
		if err := unix.Mknod(full, mode, int(unix.Mkdev(uint32(info.Major), uint32(info.Minor)))); err != nil {
			return fmt.Errorf("mknod %s (%d:%d): %w", full, info.Major, info.Minor, err)
		}
		// mknod applies the umask; the driver's nodes are world-accessible.
		return os.Chmod(full, info.Mode.Perm())
	})
}
