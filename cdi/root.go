package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// NodeInfo is what the container runtime needs to know about a device node: its type
// ("c" for character, "b" for block), major and minor numbers, and permission bits.
type NodeInfo struct {
	// Type is "c" for a character device, "b" for a block device.
	Type string
	// Major is the device node's major number.
	Major int64
	// Minor is the device node's minor number.
	Minor int64
	// Mode is the node's permission bits.
	Mode os.FileMode
}

// DriverRoot is a read-only view of a node's NVIDIA driver installation: device nodes under
// /dev, kernel files under /proc, and driver libraries, binaries and firmware.
//
// Every path argument is absolute and written as it appears on a host with the driver installed
// at "/" (for example "/dev/nvidia0", "/proc/devices", "/usr/bin/nvidia-smi"). That is also the
// path a container sees. The implementation decides where the file really is.
//
// Implementations must be safe for concurrent use. HostRoot is the real one;
// cdi/cditest provides a fake laid out in a directory.
type DriverRoot interface {
	// ReadFile returns the content of a file, for example "/proc/driver/nvidia-caps/mig-minors".
	ReadFile(path string) ([]byte, error)
	// ReadDir lists a directory, for example "/usr/lib/x86_64-linux-gnu".
	ReadDir(path string) ([]fs.DirEntry, error)
	// Stat describes a file, following symbolic links.
	Stat(path string) (fs.FileInfo, error)
	// DeviceNode returns the type, numbers and mode of a device node such as "/dev/nvidia0".
	// A missing node gives an error that wraps fs.ErrNotExist.
	DeviceNode(path string) (NodeInfo, error)
	// HostPath returns the path of a file on the host, which is what a CDI spec must name as a
	// mount's or a device node's host path.
	HostPath(path string) string
}

// HostRoot is the DriverRoot of a real node. It reads device nodes below a dev root, /proc files
// below a proc root, and everything else below the driver root. When the process runs in a
// container that sees the host's directories at other paths, the host-side paths can be set
// separately so that specs name the paths the container runtime on the host will see.
type HostRoot struct {
	driverRoot, devRoot, procRoot string
	// procDir is the directory read for "/proc": WithProcDir's, else procRoot's "proc".
	procDir                     string
	hostDriverRoot, hostDevRoot string
}

var _ DriverRoot = (*HostRoot)(nil)

// HostRootOption configures NewHostRoot.
type HostRootOption func(*HostRoot)

// WithDevRoot reads device nodes ("/dev/...") below dir instead of below the driver root.
// Use "/" when the driver runs in a container (driver root "/run/nvidia/driver") but creates its
// device nodes in the host's /dev.
func WithDevRoot(dir string) HostRootOption { return func(r *HostRoot) { r.devRoot = dir } }

// WithProcRoot reads "/proc/..." files below dir instead of below "/". The default is right for
// almost every setup: the NVIDIA /proc files belong to the host kernel, not to the driver root.
func WithProcRoot(dir string) HostRootOption { return func(r *HostRoot) { r.procRoot = dir } }

// WithProcDir reads "/proc/..." files from dir, the directory that stands for /proc itself (for
// example the host's /proc mounted at "/host/proc" in a container); "/proc/devices" is then
// dir/devices. It takes precedence over WithProcRoot.
func WithProcDir(dir string) HostRootOption { return func(r *HostRoot) { r.procDir = dir } }

// WithHostDriverRoot sets the host path of the driver root, when this process sees it elsewhere
// (for example the host's "/run/nvidia/driver" mounted at "/driver-root" in the plugin's pod).
// The default is the driver root itself.
func WithHostDriverRoot(dir string) HostRootOption {
	return func(r *HostRoot) { r.hostDriverRoot = dir }
}

// WithHostDevRoot sets the host path of the dev root, like WithHostDriverRoot does for the
// driver root. The default is the host driver root when no dev root was given, else the dev root.
func WithHostDevRoot(dir string) HostRootOption { return func(r *HostRoot) { r.hostDevRoot = dir } }

// NewHostRoot returns the DriverRoot for a driver installed below driverRoot ("/" for a driver
// installed on the host, "/run/nvidia/driver" for the GPU operator's driver container). The dev
// root defaults to the driver root and the proc root to "/". All roots must be absolute, and the
// driver root must be a directory.
func NewHostRoot(driverRoot string, opts ...HostRootOption) (*HostRoot, error) {
	r := &HostRoot{driverRoot: driverRoot, procRoot: "/"}
	for _, o := range opts {
		o(r)
	}
	if r.devRoot == "" {
		r.devRoot = r.driverRoot
		if r.hostDevRoot == "" {
			r.hostDevRoot = r.hostDriverRoot
		}
	}
	if r.hostDriverRoot == "" {
		r.hostDriverRoot = r.driverRoot
	}
	if r.hostDevRoot == "" {
		r.hostDevRoot = r.devRoot
	}
	for _, f := range []struct {
		name string
		p    *string
	}{
		{"driver root", &r.driverRoot}, {"dev root", &r.devRoot}, {"proc root", &r.procRoot},
		{"host driver root", &r.hostDriverRoot}, {"host dev root", &r.hostDevRoot},
	} {
		if !filepath.IsAbs(*f.p) {
			return nil, fmt.Errorf("%s %q: must be an absolute path", f.name, *f.p)
		}
		*f.p = filepath.Clean(*f.p)
	}
	if r.procDir == "" {
		r.procDir = filepath.Join(r.procRoot, "proc")
	} else if !filepath.IsAbs(r.procDir) {
		return nil, fmt.Errorf("proc dir %q: must be an absolute path", r.procDir)
	}
	r.procDir = filepath.Clean(r.procDir)
	st, err := os.Stat(r.driverRoot)
	if err != nil {
		return nil, fmt.Errorf("driver root: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("driver root %s: not a directory", r.driverRoot)
	}
	return r, nil
}

// DriverRootDir returns the directory this process reads driver files from.
func (r *HostRoot) DriverRootDir() string { return r.driverRoot }

// Resolve returns the path this process opens for path: below the proc, dev or driver root.
func (r *HostRoot) Resolve(p string) string {
	p = cleanAbs(p)
	switch {
	case under(p, "/proc"):
		return filepath.Join(r.procDir, strings.TrimPrefix(p, "/proc"))
	case under(p, "/dev"):
		return filepath.Join(r.devRoot, p)
	default:
		return filepath.Join(r.driverRoot, p)
	}
}

// ReadFile implements DriverRoot.
func (r *HostRoot) ReadFile(p string) ([]byte, error) { return os.ReadFile(r.Resolve(p)) }

// ReadDir implements DriverRoot.
func (r *HostRoot) ReadDir(p string) ([]fs.DirEntry, error) { return os.ReadDir(r.Resolve(p)) }

// Stat implements DriverRoot.
func (r *HostRoot) Stat(p string) (fs.FileInfo, error) { return os.Stat(r.Resolve(p)) }

// DeviceNode implements DriverRoot by stat'ing the node; a file that is not a character or block
// device is an error.
func (r *HostRoot) DeviceNode(p string) (NodeInfo, error) {
	return statDeviceNode(r.Resolve(p))
}

// HostPath implements DriverRoot.
func (r *HostRoot) HostPath(p string) string {
	p = cleanAbs(p)
	switch {
	case under(p, "/dev"):
		return filepath.Join(r.hostDevRoot, p)
	default:
		return filepath.Join(r.hostDriverRoot, p)
	}
}

// errNotDevice is returned for a path that exists but is not a device node.
var errNotDevice = errors.New("not a character or block device")

// cleanAbs makes p absolute and removes "..", so that no path escapes a root.
func cleanAbs(p string) string { return path.Clean("/" + p) }

// under reports whether p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
