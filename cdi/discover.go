package cdi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/specs-go"
)

// Paths of the files and device nodes this package reads, as seen on a host with the driver at /.
const (
	// ProcDevicesPath lists the major numbers of character and block drivers.
	ProcDevicesPath = "/proc/devices"
	// MIGMinorsPath maps MIG capabilities ("gpu0/gi1/ci0/access") to nvidia-caps minors.
	MIGMinorsPath = "/proc/driver/nvidia-caps/mig-minors"
	// DriverVersionPath holds the loaded kernel module's version line.
	DriverVersionPath = "/proc/driver/nvidia/version"
	// CapsDeviceDir holds the MIG capability device nodes nvidia-cap<minor>.
	CapsDeviceDir = "/dev/nvidia-caps"
	// FirmwareDir holds one directory of GSP firmware per driver version.
	FirmwareDir = "/lib/firmware/nvidia"
)

// Control device nodes. Every CUDA container needs nvidiactl; the others are added when the
// host has them (nvidia-uvm appears when the UVM module is loaded, nvidia-modeset with modeset).
const (
	NvidiaCtlPath      = "/dev/nvidiactl"
	NvidiaUVMPath      = "/dev/nvidia-uvm"
	NvidiaUVMToolsPath = "/dev/nvidia-uvm-tools"
	NvidiaModesetPath  = "/dev/nvidia-modeset"
)

// Binary names looked up in the binary search path, in the order they are mounted.
const (
	NvidiaSMI          = "nvidia-smi"
	NvidiaDebugdump    = "nvidia-debugdump"
	NvidiaPersistenced = "nvidia-persistenced"
	MPSControl         = "nvidia-cuda-mps-control"
	MPSServer          = "nvidia-cuda-mps-server"
)

// DefaultLibrarySearchPaths are the directories searched for driver libraries, first match of a
// file name wins. Aliases of these through /lib symbolic links are deliberately absent.
func DefaultLibrarySearchPaths() []string {
	return []string{"/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"}
}

// DefaultBinarySearchPaths are the directories searched for driver binaries, first match wins.
func DefaultBinarySearchPaths() []string {
	return []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin", "/sbin"}
}

// DefaultBinaries are the binaries mounted into containers when the driver root has them.
func DefaultBinaries() []string {
	return []string{NvidiaSMI, NvidiaDebugdump, NvidiaPersistenced, MPSControl, MPSServer}
}

// File is one file of the driver installation.
type File struct {
	// Path is the file's path inside the driver root, which is also its path in a container.
	Path string
	// HostPath is where the container runtime on the host finds it.
	HostPath string
}

// Installation is what Discover found in a driver root: the driver version and the files that
// every GPU container gets mounted. Device nodes and MIG capabilities are not cached here: the
// methods that return them read the driver root on each call, because nodes appear late (UVM)
// and numbers change when the driver is reloaded.
//
// An Installation is immutable and safe for concurrent use.
type Installation struct {
	root DriverRoot
	// DriverVersion is the version string of the driver, as in library file names ("580.95.05").
	DriverVersion string
	// Libraries are the driver's user-space libraries (lib*.so.<DriverVersion>), sorted by path.
	Libraries []File
	// Binaries are the utility and MPS binaries found, in DefaultBinaries order.
	Binaries []File
	// Firmware are the GSP firmware files of this driver version, sorted by path.
	Firmware []File
}

// DiscoverOption configures Discover.
type DiscoverOption func(*discoverConfig)

type discoverConfig struct {
	version  string
	libPaths []string
	binPaths []string
	binaries []string
}

// WithDriverVersion sets the driver version instead of reading it from DriverVersionPath.
// It must be the string used in library file names ("580.95.05", not a normalised "580.95.5").
func WithDriverVersion(v string) DiscoverOption {
	return func(c *discoverConfig) { c.version = v }
}

// WithLibrarySearchPaths replaces DefaultLibrarySearchPaths.
func WithLibrarySearchPaths(dirs ...string) DiscoverOption {
	return func(c *discoverConfig) { c.libPaths = slices.Clone(dirs) }
}

// WithBinarySearchPaths replaces DefaultBinarySearchPaths.
func WithBinarySearchPaths(dirs ...string) DiscoverOption {
	return func(c *discoverConfig) { c.binPaths = slices.Clone(dirs) }
}

// WithBinaries replaces DefaultBinaries, the names of the binaries to mount.
func WithBinaries(names ...string) DiscoverOption {
	return func(c *discoverConfig) { c.binaries = slices.Clone(names) }
}

var versionRE = regexp.MustCompile(`Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\s`)

// Discover finds the driver version, libraries, binaries and firmware of the installation in
// root. It fails when the driver version cannot be determined or no libcuda.so.<version> exists,
// because a spec without them cannot run CUDA.
func Discover(root DriverRoot, opts ...DiscoverOption) (*Installation, error) {
	if root == nil {
		return nil, errors.New("cdi: Discover: nil DriverRoot (use NewHostRoot)")
	}
	c := discoverConfig{
		libPaths: DefaultLibrarySearchPaths(),
		binPaths: DefaultBinarySearchPaths(),
		binaries: DefaultBinaries(),
	}
	for _, o := range opts {
		o(&c)
	}
	inst := &Installation{root: root, DriverVersion: c.version}
	if inst.DriverVersion == "" {
		v, err := readDriverVersion(root)
		if err != nil {
			return nil, err
		}
		inst.DriverVersion = v
	}
	if err := inst.findLibraries(c.libPaths); err != nil {
		return nil, err
	}
	inst.findBinaries(c.binaries, c.binPaths)
	if err := inst.findFirmware(); err != nil {
		return nil, err
	}
	return inst, nil
}

// readDriverVersion reads the kernel module's version from DriverVersionPath.
func readDriverVersion(root DriverRoot) (string, error) {
	data, err := root.ReadFile(DriverVersionPath)
	if err != nil {
		return "", fmt.Errorf("driver version: %w (is the NVIDIA kernel module loaded?)", err)
	}
	m := versionRE.FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("driver version: no \"Kernel Module <version>\" in %s: %q", DriverVersionPath, firstLine(data))
	}
	return string(m[1]), nil
}

// findLibraries collects the lib*.so.<version> files of the search paths, the first of each
// name, sorted by path; libcuda must be among them.
func (inst *Installation) findLibraries(libPaths []string) error {
	suffix := ".so." + inst.DriverVersion
	seen := map[string]bool{}
	for _, dir := range libPaths {
		entries, err := inst.root.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("library directory %s: %w", dir, err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasPrefix(name, "lib") || !strings.HasSuffix(name, suffix) || seen[name] {
				continue
			}
			seen[name] = true
			inst.Libraries = append(inst.Libraries, inst.file(path.Join(dir, name)))
		}
	}
	if !seen["libcuda"+suffix] {
		return fmt.Errorf("driver %s: libcuda%s not found in library search paths %v", inst.DriverVersion, suffix, libPaths)
	}
	slices.SortFunc(inst.Libraries, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return nil
}

// findBinaries collects each named binary from the first search path that has it.
func (inst *Installation) findBinaries(names, binPaths []string) {
	for _, name := range names {
		for _, dir := range binPaths {
			p := path.Join(dir, name)
			st, err := inst.root.Stat(p)
			if err != nil || st.IsDir() {
				continue
			}
			inst.Binaries = append(inst.Binaries, inst.file(p))
			break
		}
	}
}

// findFirmware collects the files of the driver version's firmware directory, if it has one.
func (inst *Installation) findFirmware() error {
	fwDir := path.Join(FirmwareDir, inst.DriverVersion)
	entries, err := inst.root.ReadDir(fwDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("firmware directory %s: %w", fwDir, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			inst.Firmware = append(inst.Firmware, inst.file(path.Join(fwDir, e.Name())))
		}
	}
	return nil
}

func (inst *Installation) file(p string) File { return File{Path: p, HostPath: inst.root.HostPath(p)} }

// Root returns the driver root the installation was discovered in.
func (inst *Installation) Root() DriverRoot { return inst.root }

// Binary returns the named binary (for example MPSControl) if Discover found it.
func (inst *Installation) Binary(name string) (File, bool) {
	for _, f := range inst.Binaries {
		if path.Base(f.Path) == name {
			return f, true
		}
	}
	return File{}, false
}

// LibraryDirs returns the directories that hold the driver libraries, sorted; these are the
// folders an ldcache update needs.
func (inst *Installation) LibraryDirs() []string {
	var dirs []string
	for _, l := range inst.Libraries {
		if d := path.Dir(l.Path); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	return dirs
}

// DeviceNode returns the CDI device node for p (for example "/dev/nvidia0") with its type,
// numbers and mode read from the driver root now, and its host path when that differs.
func (inst *Installation) DeviceNode(p string) (*specs.DeviceNode, error) {
	info, err := inst.root.DeviceNode(p)
	if err != nil {
		return nil, err
	}
	return inst.node(p, info), nil
}

func (inst *Installation) node(p string, info NodeInfo) *specs.DeviceNode {
	n := &specs.DeviceNode{Path: p, Type: info.Type, Major: info.Major, Minor: info.Minor}
	if hp := inst.root.HostPath(p); hp != p {
		n.HostPath = hp
	}
	if info.Mode != 0 {
		mode := info.Mode
		n.FileMode = &mode
	}
	return n
}

// GPUDeviceNode returns the node /dev/nvidia<minor> of a full GPU (or of a MIG device's parent).
func (inst *Installation) GPUDeviceNode(minor int) (*specs.DeviceNode, error) {
	if minor < 0 || minor > 254 {
		return nil, fmt.Errorf("GPU minor %d: must be in [0, 254]", minor)
	}
	p := "/dev/nvidia" + strconv.Itoa(minor)
	n, err := inst.DeviceNode(p)
	if err != nil {
		return nil, fmt.Errorf("GPU device node for minor %d: %w", minor, err)
	}
	return n, nil
}

// ControlDeviceNodes returns nvidiactl (required) and, when present, nvidia-uvm,
// nvidia-uvm-tools and nvidia-modeset, in that order.
func (inst *Installation) ControlDeviceNodes() ([]*specs.DeviceNode, error) {
	var nodes []*specs.DeviceNode
	for _, p := range []string{NvidiaCtlPath, NvidiaUVMPath, NvidiaUVMToolsPath, NvidiaModesetPath} {
		n, err := inst.DeviceNode(p)
		switch {
		case err == nil:
			nodes = append(nodes, n)
		case p == NvidiaCtlPath:
			return nil, fmt.Errorf("control device node: %w", err)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("optional control device node: %w", err)
		}
	}
	return nodes, nil
}

// GPUDeviceNodes lists the minors of the /dev/nvidia<N> nodes present now, sorted.
func (inst *Installation) GPUDeviceNodes() ([]int, error) {
	entries, err := inst.root.ReadDir("/dev")
	if err != nil {
		return nil, fmt.Errorf("list /dev: %w", err)
	}
	var minors []int
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "nvidia")
		if !ok || rest == "" {
			continue
		}
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 && strconv.Itoa(n) == rest {
			minors = append(minors, n)
		}
	}
	slices.Sort(minors)
	return minors, nil
}

// MIGCaps is the table of MIG capability device nodes of a host: the nvidia-caps major number
// and the minor of each GPU-instance and compute-instance access capability.
type MIGCaps struct {
	// Major is the nvidia-caps character device major, from ProcDevicesPath.
	Major int64
	// minors is the content of MIGMinorsPath; lines are looked up on demand, because the file
	// has a line for every possible capability of every GPU (over a thousand on 8 GPUs).
	minors []byte
	inst   *Installation
}

// MIGCaps reads the nvidia-caps major from ProcDevicesPath and the capability minors from
// MIGMinorsPath, now.
func (inst *Installation) MIGCaps() (*MIGCaps, error) {
	devs, err := inst.root.ReadFile(ProcDevicesPath)
	if err != nil {
		return nil, fmt.Errorf("MIG capabilities: %w", err)
	}
	major, err := charDeviceMajor(devs, "nvidia-caps")
	if err != nil {
		return nil, fmt.Errorf("MIG capabilities: %s: %w", ProcDevicesPath, err)
	}
	data, err := inst.root.ReadFile(MIGMinorsPath)
	if err != nil {
		return nil, fmt.Errorf("MIG capabilities: %w", err)
	}
	return &MIGCaps{Major: major, minors: data, inst: inst}, nil
}

// Minor returns the minor of a capability ("gpu0/gi1/access", "gpu0/gi1/ci0/access", "config")
// and whether MIGMinorsPath lists it; a malformed line for that capability is an error.
func (c *MIGCaps) Minor(capability string) (int64, bool, error) {
	return findMinor(c.minors, capability)
}

// GIKey and CIKey name the access capabilities of a GPU instance and of a compute instance.
func GIKey(gpuMinor, gi int) string { return fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi) }

// CIKey names the access capability of compute instance ci in GPU instance gi; see GIKey.
func CIKey(gpuMinor, gi, ci int) string {
	return fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci)
}

// DeviceNodes returns the GI and CI capability nodes (/dev/nvidia-caps/nvidia-cap<minor>) that a
// MIG device with GPU instance gi and compute instance ci on the GPU with minor gpuMinor needs.
// The nodes are fully specified (type, major, minor), so injection works even where the host has
// not created them yet; the mode is taken from the host node when it exists.
func (c *MIGCaps) DeviceNodes(gpuMinor, gi, ci int) ([]*specs.DeviceNode, error) {
	var nodes []*specs.DeviceNode
	for _, key := range []string{GIKey(gpuMinor, gi), CIKey(gpuMinor, gi, ci)} {
		minor, ok, err := c.Minor(key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", MIGMinorsPath, err)
		}
		if !ok {
			return nil, fmt.Errorf("MIG capability %q not in %s (GPU minor %d, GI %d, CI %d)", key, MIGMinorsPath, gpuMinor, gi, ci)
		}
		p := path.Join(CapsDeviceDir, "nvidia-cap"+strconv.FormatInt(minor, 10))
		info := NodeInfo{Type: "c", Major: c.Major, Minor: minor}
		if host, err := c.inst.root.DeviceNode(p); err == nil && host.Type == "c" && host.Major == c.Major && host.Minor == minor {
			info.Mode = host.Mode
		}
		nodes = append(nodes, c.inst.node(p, info))
	}
	return nodes, nil
}

// charDeviceMajor finds the major of a named character device in /proc/devices content.
func charDeviceMajor(data []byte, name string) (int64, error) {
	s := bufio.NewScanner(bytes.NewReader(data))
	inChar := false
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		switch {
		case line == "Character devices:":
			inChar = true
			continue
		case strings.HasSuffix(line, "devices:"):
			inChar = false
			continue
		}
		f := strings.Fields(line)
		if !inChar || len(f) != 2 || f[1] != name {
			continue
		}
		major, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || major <= 0 {
			return 0, fmt.Errorf("character device %s: bad major %q", name, f[0])
		}
		return major, nil
	}
	return 0, fmt.Errorf("no character device %q (is the nvidia driver loaded with MIG support?)", name)
}

// findMinor finds the line "<capability> <minor>" of mig-minors content.
func findMinor(data []byte, capability string) (int64, bool, error) {
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		line = bytes.TrimSpace(line)
		rest, ok := bytes.CutPrefix(line, []byte(capability))
		if !ok || len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		m, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64)
		if err != nil || m < 0 {
			return 0, false, fmt.Errorf("line %d: %q: minor must be a non-negative integer", n, line)
		}
		return m, true, nil
	}
	return 0, false, nil
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return string(line)
}
