package cditest

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpudra/gpudra/cdi"
)

// Numbers recorded for the fake device nodes. NvidiaMajor is fixed by the driver; the others
// are dynamic on real hosts and chosen here to look like typical values.
const (
	NvidiaMajor     = 195
	NvidiactlMinor  = 255
	ModesetMinor    = 254
	UVMMajor        = 508
	CapsMajor       = 237
	DefaultVersion  = "580.95.05"
	DefaultLibDir   = "/usr/lib/x86_64-linux-gnu"
	DefaultBinDir   = "/usr/bin"
	DefaultNodeMode = os.FileMode(0o666)
	DefaultGPUs     = 8
)

// DefaultLibraries are the library base names laid out as <name>.so.<version>.
func DefaultLibraries() []string {
	return []string{"libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-nvvm", "libcudadebugger"}
}

// DefaultFirmware are the GSP firmware files laid out in /lib/firmware/nvidia/<version>.
func DefaultFirmware() []string { return []string{"gsp_ga10x.bin", "gsp_tu10x.bin"} }

// Layout describes a fake driver root. The zero value is a host with DefaultGPUs GPUs, MIG
// support, UVM and modeset nodes, DefaultLibraries, cdi.DefaultBinaries and DefaultFirmware.
type Layout struct {
	// DriverVersion defaults to DefaultVersion.
	DriverVersion string
	// GPUs is the number of /dev/nvidia<N> nodes (minors 0..GPUs-1); 0 means DefaultGPUs.
	GPUs int
	// LibDir defaults to DefaultLibDir.
	LibDir string
	// Libraries, Binaries and Firmware replace the defaults when not nil.
	Libraries, Binaries, Firmware []string
	// NoUVM and NoModeset leave those control nodes out.
	NoUVM, NoModeset bool
	// NoMIG leaves nvidia-caps out of /proc/devices and omits the mig-minors file.
	NoMIG bool
	// CapsNodes also lays out /dev/nvidia-caps/nvidia-cap<minor> for every GI and CI capability,
	// with mode 0444.
	CapsNodes bool
	// HostDriverRoot is the host path specs name for files of this root; default "/", so specs
	// look as on a host with the driver installed at "/".
	HostDriverRoot string
}

// DriverRoot is a fake cdi.DriverRoot: files are read from a directory, device node numbers
// come from a table. It is safe for concurrent use.
type DriverRoot struct {
	*cdi.HostRoot
	dir   string
	mu    sync.Mutex
	nodes map[string]cdi.NodeInfo
}

var _ cdi.DriverRoot = (*DriverRoot)(nil)

// Build lays out l in dir, which is created if missing and should be empty, and returns the root.
func Build(dir string, l Layout) (*DriverRoot, error) {
	l.setDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hr, err := cdi.NewHostRoot(dir, cdi.WithProcRoot(dir), cdi.WithHostDriverRoot(l.HostDriverRoot))
	if err != nil {
		return nil, err
	}
	r := &DriverRoot{HostRoot: hr, dir: dir, nodes: map[string]cdi.NodeInfo{}}
	for p, content := range l.files() {
		if err := r.writeFile(p, content); err != nil {
			return nil, err
		}
	}
	for p, info := range l.deviceNodes() {
		if err := r.SetDeviceNode(p, info); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// setDefaults fills the fields l leaves empty.
func (l *Layout) setDefaults() {
	if l.DriverVersion == "" {
		l.DriverVersion = DefaultVersion
	}
	if l.GPUs == 0 {
		l.GPUs = DefaultGPUs
	}
	if l.LibDir == "" {
		l.LibDir = DefaultLibDir
	}
	if l.Libraries == nil {
		l.Libraries = DefaultLibraries()
	}
	if l.Binaries == nil {
		l.Binaries = cdi.DefaultBinaries()
	}
	if l.Firmware == nil {
		l.Firmware = DefaultFirmware()
	}
	if l.HostDriverRoot == "" {
		l.HostDriverRoot = "/"
	}
}

// files are the regular files of the layout by path: the driver version, /proc/devices, the
// MIG minors, libraries, binaries and firmware.
func (l Layout) files() map[string]string {
	files := map[string]string{
		cdi.DriverVersionPath: fmt.Sprintf("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (builder@fake)  Thu Jan  1 00:00:00 UTC 2026\nGCC version:  gcc version 12.3.0\n", l.DriverVersion),
		cdi.ProcDevicesPath:   l.procDevices(),
	}
	if !l.NoMIG {
		files[cdi.MIGMinorsPath] = l.migMinors()
	}
	for _, lib := range l.Libraries {
		files[path.Join(l.LibDir, lib+".so."+l.DriverVersion)] = "ELF " + lib
	}
	for _, bin := range l.Binaries {
		files[path.Join(DefaultBinDir, bin)] = "ELF " + bin
	}
	for _, fw := range l.Firmware {
		files[path.Join(cdi.FirmwareDir, l.DriverVersion, fw)] = "firmware " + fw
	}
	return files
}

// procDevices is /proc/devices with the driver's character devices.
func (l Layout) procDevices() string {
	devices := "Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n 10 misc\n" +
		fmt.Sprintf("%3d nvidia-frontend\n", NvidiaMajor)
	if !l.NoUVM {
		devices += fmt.Sprintf("%3d nvidia-uvm\n", UVMMajor)
	}
	if !l.NoMIG {
		devices += fmt.Sprintf("%3d nvidia-caps\n", CapsMajor)
	}
	return devices + "\nBlock devices:\n  8 sd\n259 blkext\n"
}

// migMinors is the driver's mig-minors file: the nvidia-caps minor of every GPU and compute
// instance each GPU may have.
func (l Layout) migMinors() string {
	var b strings.Builder
	b.WriteString("config 1\nmonitor 2\n")
	for gpu := range l.GPUs {
		for gi := range 15 {
			fmt.Fprintf(&b, "%s %d\n", cdi.GIKey(gpu, gi), GIMinor(gpu, gi))
			for ci := range 8 {
				fmt.Fprintf(&b, "%s %d\n", cdi.CIKey(gpu, gi, ci), CIMinor(gpu, gi, ci))
			}
		}
	}
	return b.String()
}

// deviceNodes are the device nodes of the layout by path: one per GPU, the control nodes and,
// with CapsNodes, the nvidia-caps nodes of every GPU and compute instance.
func (l Layout) deviceNodes() map[string]cdi.NodeInfo {
	nodes := map[string]cdi.NodeInfo{cdi.NvidiaCtlPath: {Type: "c", Major: NvidiaMajor, Minor: NvidiactlMinor, Mode: DefaultNodeMode}}
	for gpu := range l.GPUs {
		nodes[fmt.Sprintf("/dev/nvidia%d", gpu)] = cdi.NodeInfo{Type: "c", Major: NvidiaMajor, Minor: int64(gpu), Mode: DefaultNodeMode}
	}
	if !l.NoUVM {
		nodes[cdi.NvidiaUVMPath] = cdi.NodeInfo{Type: "c", Major: UVMMajor, Minor: 0, Mode: DefaultNodeMode}
		nodes[cdi.NvidiaUVMToolsPath] = cdi.NodeInfo{Type: "c", Major: UVMMajor, Minor: 1, Mode: DefaultNodeMode}
	}
	if !l.NoModeset {
		nodes[cdi.NvidiaModesetPath] = cdi.NodeInfo{Type: "c", Major: NvidiaMajor, Minor: ModesetMinor, Mode: DefaultNodeMode}
	}
	if l.CapsNodes && !l.NoMIG {
		for gpu := range l.GPUs {
			for gi := range 15 {
				addCapsNode(nodes, GIMinor(gpu, gi))
				for ci := range 8 {
					addCapsNode(nodes, CIMinor(gpu, gi, ci))
				}
			}
		}
	}
	return nodes
}

func addCapsNode(nodes map[string]cdi.NodeInfo, minor int64) {
	nodes[fmt.Sprintf("%s/nvidia-cap%d", cdi.CapsDeviceDir, minor)] = cdi.NodeInfo{Type: "c", Major: CapsMajor, Minor: minor, Mode: 0o444}
}

// GIMinor is the nvidia-caps minor the fake mig-minors file gives GPU instance gi of GPU gpu.
// It follows the numbering real drivers use; code under test must read the file, not this.
func GIMinor(gpu, gi int) int64 { return int64(3 + 135*gpu + 9*gi) }

// CIMinor is the minor of compute instance ci in GPU instance gi of GPU gpu; see GIMinor.
func CIMinor(gpu, gi, ci int) int64 { return GIMinor(gpu, gi) + 1 + int64(ci) }

// Dir returns the directory the root is laid out in.
func (r *DriverRoot) Dir() string { return r.dir }

func (r *DriverRoot) writeFile(p, content string) error {
	full := r.Resolve(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	return os.WriteFile(full, []byte(content), 0o644)
}

// DeviceNode implements cdi.DriverRoot from the recorded table.
func (r *DriverRoot) DeviceNode(p string) (cdi.NodeInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	info, ok := r.nodes[path.Clean("/"+p)]
	if !ok {
		return cdi.NodeInfo{}, &fs.PathError{Op: "stat", Path: r.Resolve(p), Err: fs.ErrNotExist}
	}
	return info, nil
}

// SetDeviceNode creates (or replaces) a device node: an empty regular file at p and its recorded
// numbers.
func (r *DriverRoot) SetDeviceNode(p string, info cdi.NodeInfo) error {
	if err := r.writeFile(p, ""); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes[path.Clean("/"+p)] = info
	return nil
}

// RemoveDeviceNode removes a device node, as if the driver had not created it.
func (r *DriverRoot) RemoveDeviceNode(p string) error {
	r.mu.Lock()
	delete(r.nodes, path.Clean("/"+p))
	r.mu.Unlock()
	if err := os.Remove(r.Resolve(p)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// RemoveFile removes a regular file of the root, for example cdi.MIGMinorsPath.
func (r *DriverRoot) RemoveFile(p string) error { return os.Remove(r.Resolve(p)) }

// WriteFile creates or replaces a regular file of the root.
func (r *DriverRoot) WriteFile(p, content string) error { return r.writeFile(p, content) }
