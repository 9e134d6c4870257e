package gputest

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// PCIFunction is one PCI function of a PCIHost.
type PCIFunction struct {
	// Address is the canonical PCI address ("0000:07:00.0").
	Address string
	// Class is the PCI class code: "0x030200" for a 3D controller (a datacenter GPU), "0x040300"
	// for an HD audio function, "0x060400" for a PCI bridge.
	Class string
	// Driver is the function's native driver: it is bound to it at the start, and a
	// drivers_probe without a driver_override binds it again. Empty: unbound, and a probe binds
	// nothing.
	Driver string
	// IOMMUGroup is the function's IOMMU group number.
	IOMMUGroup int
	// Minor is the NVIDIA minor number of a GPU function (/proc/driver/nvidia/gpus/<addr>/
	// information reports it while the GPU is bound to nvidia), -1 for other functions.
	Minor int
}

// PassthroughGPU returns the functions of a GPU the way a PCIe GPU with an audio controller
// shows them: the GPU at bus:00.0 (nvidia) and its HD audio function at bus:00.1
// (snd_hda_intel), both in IOMMU group group. bus is the address without its function
// ("0000:07:00").
func PassthroughGPU(bus string, group, minor int) []PCIFunction {
	return []PCIFunction{
		{Address: bus + ".0", Class: "0x030200", Driver: "nvidia", IOMMUGroup: group, Minor: minor},
		{Address: bus + ".1", Class: "0x040300", Driver: "snd_hda_intel", IOMMUGroup: group, Minor: -1},
	}
}

// PCIHost is a fake host for code that binds PCI functions to drivers through sysfs (the vfio
// package): a real directory tree holding sys/ (bus/pci/devices/<addr>/{class,
// driver_override, iommu_group, driver}, bus/pci/drivers/<name>/{bind,unbind},
// bus/pci/drivers_probe, kernel/iommu_groups/<n>/devices/<addr>), dev/ (vfio/vfio,
// vfio/<group>) and proc/ (driver/nvidia/gpus/<addr>/information, driver/nvidia/capabilities/
// gpu<minor>/mig/gi<n>, <pid>/fd/<n>), behind the vfio.FS methods (ReadFile, WriteFile,
// Readlink, ReadDir, Stat).
//
// The simulation is filesystem-backed: reads go to the tree, and a write through WriteFile to
// a driver_override, unbind, bind or drivers_probe file changes the tree as the kernel would —
// the function's driver link moves, /dev/vfio/<group> exists while a function of the group is
// bound to vfio-pci, and /proc/driver/nvidia/gpus/<addr> exists while the GPU is bound to
// nvidia. Writes to the tree made around WriteFile (os.WriteFile) are not simulated.
//
// Every WriteFile goes through one gate, as the Machine's NVML calls do: the host's lock, then
// the write is logged (Writes) and an injected failure (FailWrite) is returned in place of the
// write, which then changes nothing. A PCIHost is safe for concurrent use.
type PCIHost struct {
	root string

	mu         sync.Mutex
	funcs      map[string]*pciFunction
	vfioLoaded bool
	noNodes    bool // SetVFIODeviceNodes(false)
	writes     []string
	faults     []*writeFault
}

type pciFunction struct {
	PCIFunction
	driver   string // bound now, "" when none
	override string
}

type writeFault struct {
	file, address string
	n             int
	err           error
}

// NewPCIHost builds the tree of a host with the given functions under dir (which must exist,
// e.g. t.TempDir()). vfio-pci is loaded. A dir that already holds the tree of a host with these
// functions (made by NewPCIHost, possibly in a process since killed) is continued: each
// function's driver and driver_override are read back from it, as a real host keeps its bindings
// when the process that changed them dies.
func NewPCIHost(dir string, functions ...PCIFunction) (*PCIHost, error) {
	h := &PCIHost{root: dir, funcs: map[string]*pciFunction{}, vfioLoaded: true}
	for _, d := range []string{"sys/bus/pci/devices", "sys/bus/pci/drivers/vfio-pci", "dev/vfio", "proc/driver/nvidia/gpus"} {
		if err := os.MkdirAll(h.path(d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, f := range []string{"sys/bus/pci/drivers_probe", "sys/bus/pci/drivers/vfio-pci/bind", "sys/bus/pci/drivers/vfio-pci/unbind", "dev/vfio/vfio"} {
		if err := os.WriteFile(h.path(f), nil, 0o644); err != nil {
			return nil, err
		}
	}
	for _, f := range functions {
		if err := h.add(f); err != nil {
			return nil, fmt.Errorf("gputest: PCI function %q: %w", f.Address, err)
		}
	}
	return h, nil
}

func (h *PCIHost) path(rel string) string { return filepath.Join(h.root, filepath.FromSlash(rel)) }

func (h *PCIHost) add(f PCIFunction) error {
	if _, dup := h.funcs[f.Address]; dup || f.Address == "" || strings.ContainsAny(f.Address, "/") {
		return fmt.Errorf("empty, duplicate or not a PCI address")
	}
	if again, err := h.reopen(f); again || err != nil {
		return err
	}
	dev := "sys/bus/pci/devices/" + f.Address
	group := "sys/kernel/iommu_groups/" + strconv.Itoa(f.IOMMUGroup)
	for _, d := range []string{dev, group + "/devices"} {
		if err := os.MkdirAll(h.path(d), 0o755); err != nil {
			return err
		}
	}
	for name, content := range map[string]string{"class": f.Class + "\n", "driver_override": "(null)\n"} {
		if err := os.WriteFile(h.path(dev+"/"+name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := os.Symlink("../../../../kernel/iommu_groups/"+strconv.Itoa(f.IOMMUGroup), h.path(dev+"/iommu_group")); err != nil {
		return err
	}
	if err := os.Symlink("../../../../bus/pci/devices/"+f.Address, h.path(group+"/devices/"+f.Address)); err != nil {
		return err
	}
	pf := &pciFunction{PCIFunction: f}
	h.funcs[f.Address] = pf
	if f.Driver != "" {
		return h.bind(pf, f.Driver)
	}
	return nil
}

// reopen continues a function whose tree an earlier NewPCIHost made: it reports whether the tree
// was there.
func (h *PCIHost) reopen(f PCIFunction) (bool, error) {
	dev := h.path("sys/bus/pci/devices/" + f.Address)
	if _, err := os.Readlink(filepath.Join(dev, "iommu_group")); err != nil {
		return false, nil
	}
	pf := &pciFunction{PCIFunction: f}
	if link, err := os.Readlink(filepath.Join(dev, "driver")); err == nil {
		pf.driver = filepath.Base(link)
	}
	o, err := os.ReadFile(filepath.Join(dev, "driver_override"))
	if err != nil {
		return false, err
	}
	if s := strings.TrimSpace(string(o)); s != "(null)" {
		pf.override = s
	}
	h.funcs[f.Address] = pf
	return true, nil
}

// SysfsRoot returns the fake sysfs root (<dir>/sys).
func (h *PCIHost) SysfsRoot() string { return h.path("sys") }

// DevRoot returns the fake /dev root (<dir>/dev).
func (h *PCIHost) DevRoot() string { return h.path("dev") }

// ProcRoot returns the fake /proc root (<dir>/proc).
func (h *PCIHost) ProcRoot() string { return h.path("proc") }

// Driver returns the driver a function is bound to now, "" when none or unknown.
func (h *PCIHost) Driver(address string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.funcs[address]; f != nil {
		return f.driver
	}
	return ""
}

// Override returns a function's driver_override, "" when none.
func (h *PCIHost) Override(address string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.funcs[address]; f != nil {
		return f.override
	}
	return ""
}

// Writes returns every WriteFile made so far, as "<path under the root>: <data>", in order
// (failed ones included).
func (h *PCIHost) Writes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.writes)
}

// Native returns an error naming every function that is not bound to its native driver or has
// a driver_override: nil once everything a bind changed is undone.
func (h *PCIHost) Native() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, addr := range slices.Sorted(maps.Keys(h.funcs)) {
		if f := h.funcs[addr]; f.driver != f.Driver || f.override != "" {
			errs = append(errs, fmt.Errorf("PCI function %s is on driver %q with driver_override %q, want %q and none", addr, f.driver, f.override, f.Driver))
		}
	}
	return errors.Join(errs...)
}

// SetVFIOLoaded loads or unloads vfio-pci: while it is unloaded, a probe of a function whose
// driver_override is vfio-pci leaves it unbound, as on a host without the module.
func (h *PCIHost) SetVFIOLoaded(loaded bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vfioLoaded = loaded
}

// SetVFIODeviceNodes makes /dev/vfio/<group> appear when a function of the group is bound to
// vfio-pci (true, the default) or never (false), as in a container whose /dev is not the host's.
func (h *PCIHost) SetVFIODeviceNodes(appear bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noNodes = !appear
}

// FailWrite makes the nth next WriteFile (1: the next) to a file named file ("driver_override",
// "unbind", "bind", "drivers_probe") for the function address ("" any) fail with err, changing
// nothing.
func (h *PCIHost) FailWrite(file, address string, n int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, &writeFault{file: file, address: address, n: n, err: err})
}

// OpenDevice makes process pid hold /dev/nvidia<minor> open (as /proc/<pid>/fd/<fd>).
func (h *PCIHost) OpenDevice(pid, fd, minor int) error {
	dir := h.path(fmt.Sprintf("proc/%d/fd", pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Symlink("/dev/nvidia"+strconv.Itoa(minor), filepath.Join(dir, strconv.Itoa(fd)))
}

// CloseDevices ends process pid: its descriptors are gone.
func (h *PCIHost) CloseDevices(pid int) error {
	return os.RemoveAll(h.path("proc/" + strconv.Itoa(pid)))
}

// AddMIGInstance makes the nvidia driver report GPU instance gi on the GPU with the minor, as
// /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi> does.
func (h *PCIHost) AddMIGInstance(minor, gi int) error {
	return os.MkdirAll(h.path(fmt.Sprintf("proc/driver/nvidia/capabilities/gpu%d/mig/gi%d/access", minor, gi)), 0o755)
}

// RemoveMIGInstances removes every GPU instance of the GPU with the minor.
func (h *PCIHost) RemoveMIGInstances(minor int) error {
	return os.RemoveAll(h.path(fmt.Sprintf("proc/driver/nvidia/capabilities/gpu%d/mig", minor)))
}

// ReadFile implements vfio.FS.
func (h *PCIHost) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// Readlink implements vfio.FS.
func (h *PCIHost) Readlink(name string) (string, error) { return os.Readlink(name) }

// Stat implements vfio.FS.
func (h *PCIHost) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// VFIOMajor is the major number the fake host's /dev/vfio/<group> nodes have; their minor is
// the group number.
const VFIOMajor = 511

// CharDevice implements vfio.FS: /dev/vfio/<group> (while it exists) is a character device
// VFIOMajor:<group>, and /dev/vfio/vfio is 10:196; any other file is not a device.
func (h *PCIHost) CharDevice(name string) (major, minor int64, err error) {
	if _, err := os.Stat(name); err != nil {
		return 0, 0, err
	}
	rel, err := filepath.Rel(h.path("dev/vfio"), name)
	if err == nil && rel == "vfio" {
		return 10, 196, nil
	}
	if g, err := strconv.Atoi(rel); err == nil && g >= 0 {
		return VFIOMajor, int64(g), nil
	}
	return 0, 0, fmt.Errorf("%s is not a character device", name)
}

// ReadDir implements vfio.FS.
func (h *PCIHost) ReadDir(name string) ([]string, error) {
	entries, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Name()
	}
	return out, nil
}

var errNoDevice = errors.New("no such device")

// WriteFile implements vfio.FS: a write to a driver_override, bind, unbind or drivers_probe
// file of the fake sysfs does what the kernel does; any other write goes to the file, which
// must exist.
func (h *PCIHost) WriteFile(name string, data []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	rel, err := filepath.Rel(h.path("sys"), name)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = ""
	}
	rel = filepath.ToSlash(rel)
	s := strings.TrimSpace(string(data))
	h.writes = append(h.writes, fmt.Sprintf("%s: %s", strings.TrimPrefix(name, h.root+"/"), s))
	file, addr := sysfsTarget(rel, s)
	if err := h.fault(file, addr); err != nil {
		return err
	}
	if file == "" {
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		return errors.Join(err, f.Close())
	}
	return h.simulate(rel, file, addr, s)
}

// sysfsTarget returns which simulated file a write under sys/ goes to and which function it is
// about ("" and "" for another file).
func sysfsTarget(rel, data string) (file, addr string) {
	parts := strings.Split(rel, "/")
	switch {
	case rel == "bus/pci/drivers_probe":
		return "drivers_probe", data
	case len(parts) == 5 && parts[2] == "devices" && parts[4] == "driver_override":
		return "driver_override", parts[3]
	case len(parts) == 6 && parts[2] == "devices" && parts[4] == "driver" && parts[5] == "unbind":
		return "unbind", parts[3]
	case len(parts) == 5 && parts[2] == "drivers" && (parts[4] == "bind" || parts[4] == "unbind"):
		return parts[4], data
	}
	return "", ""
}

func (h *PCIHost) fault(file, addr string) error {
	for i, f := range h.faults {
		if f.file != file || (f.address != "" && f.address != addr) {
			continue
		}
		if f.n--; f.n <= 0 {
			h.faults = slices.Delete(h.faults, i, i+1)
			return f.err
		}
	}
	return nil
}

func (h *PCIHost) simulate(rel, file, addr, data string) error {
	f := h.funcs[addr]
	if f == nil {
		return fmt.Errorf("write %q to %s: %w", data, rel, errNoDevice)
	}
	switch file {
	case "driver_override":
		f.override = data
		content := data
		if content == "" {
			content = "(null)"
		}
		return os.WriteFile(h.path("sys/bus/pci/devices/"+addr+"/driver_override"), []byte(content+"\n"), 0o644)
	case "unbind":
		if f.driver == "" || (strings.HasPrefix(rel, "bus/pci/drivers/") && strings.Split(rel, "/")[3] != f.driver) {
			return fmt.Errorf("unbind %s: not bound to that driver: %w", addr, errNoDevice)
		}
		return h.unbind(f)
	case "bind":
		driver := strings.Split(rel, "/")[3]
		if f.driver != "" || (f.override != "" && f.override != driver) || (driver == "vfio-pci" && !h.vfioLoaded) {
			return fmt.Errorf("bind %s to %s: %w", addr, driver, errNoDevice)
		}
		return h.bind(f, driver)
	}
	// drivers_probe
	driver := f.Driver
	if f.override != "" {
		driver = f.override
	}
	if f.driver != "" || driver == "" || (driver == "vfio-pci" && !h.vfioLoaded) {
		return nil
	}
	return h.bind(f, driver)
}

func (h *PCIHost) bind(f *pciFunction, driver string) error {
	dir := h.path("sys/bus/pci/drivers/" + driver)
	for _, file := range []string{"bind", "unbind"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(dir, file)); errors.Is(err, fs.ErrNotExist) {
			if err := os.WriteFile(filepath.Join(dir, file), nil, 0o644); err != nil {
				return err
			}
		}
	}
	if err := os.Symlink("../../../../bus/pci/drivers/"+driver, h.path("sys/bus/pci/devices/"+f.Address+"/driver")); err != nil {
		return err
	}
	f.driver = driver
	return h.sync(f)
}

func (h *PCIHost) unbind(f *pciFunction) error {
	if err := os.Remove(h.path("sys/bus/pci/devices/" + f.Address + "/driver")); err != nil {
		return err
	}
	f.driver = ""
	return h.sync(f)
}

// sync makes /dev/vfio/<group> and the nvidia driver's procfs entry follow the bindings.
func (h *PCIHost) sync(f *pciFunction) error {
	info := h.path("proc/driver/nvidia/gpus/" + f.Address)
	if f.Minor >= 0 && f.driver == "nvidia" {
		if err := os.MkdirAll(info, 0o755); err != nil {
			return err
		}
		content := fmt.Sprintf("Model: \t\t NVIDIA fake\nIRQ:   \t\t 0\nDevice Minor: \t %d\nBus Location: \t %s\n", f.Minor, f.Address)
		if err := os.WriteFile(filepath.Join(info, "information"), []byte(content), 0o644); err != nil {
			return err
		}
	} else if err := os.RemoveAll(info); err != nil {
		return err
	}
	vfio := false
	for _, g := range h.funcs {
		vfio = vfio || (g.IOMMUGroup == f.IOMMUGroup && g.driver == "vfio-pci")
	}
	node := h.path("dev/vfio/" + strconv.Itoa(f.IOMMUGroup))
	if !vfio || h.noNodes {
		return os.RemoveAll(node)
	}
	return os.WriteFile(node, nil, 0o600)
}
