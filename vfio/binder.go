package vfio

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/pciaddr"
)

// DriverVFIO is the name of the vfio-pci driver.
const DriverVFIO = "vfio-pci"

// DefaultNativeDriver is the driver a GPU goes back to when it is unbound from vfio-pci.
const DefaultNativeDriver = "nvidia"

// Binder binds a GPU, with every function of its IOMMU group, to vfio-pci and back. A GPU is
// named by its PCI address in any of the spellings NVML and sysfs use ("00000000:07:00.0",
// "0000:07:00.0"). SysfsBinder is the implementation over sysfs.
type Binder interface {
	// Group returns the GPU's IOMMU group as it is now, without changing anything.
	Group(ctx context.Context, pciAddress string) (*Group, error)
	// Bind binds every function of the GPU's IOMMU group to vfio-pci and waits for the group's
	// device node. A GPU already bound is not an error. A GPU in use is refused, with an
	// error that says what uses it (errors.Is ErrInUse). On any other failure Bind restores
	// the functions it changed before it returns.
	Bind(ctx context.Context, pciAddress string) (*Group, error)
	// Unbind gives every function of the GPU's IOMMU group back to its native driver. A GPU
	// not bound to vfio-pci is not an error.
	Unbind(ctx context.Context, pciAddress string) error
}

// ErrInUse is the error (errors.Is) of a Bind refused because the GPU is in use.
var ErrInUse = errors.New("GPU is in use")

// Group is an IOMMU group: the unit vfio hands to a virtual machine.
type Group struct {
	// ID is the IOMMU group number: the device node is /dev/vfio/<ID>.
	ID int
	// GPU is the canonical PCI address of the GPU the group was looked up for.
	GPU string
	// Functions are the group's PCI functions, by address.
	Functions []Function
	// Major and Minor are the numbers of the group's device node /dev/vfio/<ID>, as Bind found
	// it; zero from Group and before the node exists.
	Major, Minor int64
}

// The VFIO container device /dev/vfio/vfio: a misc device (major 10) with the kernel's fixed
// VFIO_MINOR.
const (
	ControlDevicePath          = "/dev/vfio/vfio"
	ControlMajor, ControlMinor = 10, 196
)

// Function is one PCI function of an IOMMU group.
type Function struct {
	// Address is the canonical PCI address.
	Address string
	// Class is the PCI class code ("0x030200": a 3D controller), empty when unreadable.
	Class string
	// Driver is the driver the function is bound to now, empty when none.
	Driver string
	// Override is the function's driver_override, empty when none.
	Override string
}

// Bridge reports whether the function is a PCI bridge, which stays with its host driver.
func (f Function) Bridge() bool { return strings.HasPrefix(f.Class, "0x0604") }

// Bound reports whether every function but bridges is bound to vfio-pci.
func (g *Group) Bound() bool {
	for _, f := range g.Functions {
		if !f.Bridge() && f.Driver != DriverVFIO {
			return false
		}
	}
	return true
}

// DevicePath is the path of the group's device node in a container: /dev/vfio/<ID>.
func (g *Group) DevicePath() string { return "/dev/vfio/" + strconv.Itoa(g.ID) }

// Step names one host write of Bind or Unbind, for WithStepHook.
type Step string

// The host writes, in the order Bind makes them per function (Unbind: ClearOverride, Unbind,
// Probe, BindNative).
const (
	StepSetOverride   Step = "set-driver-override"
	StepUnbind        Step = "unbind"
	StepProbe         Step = "drivers-probe"
	StepClearOverride Step = "clear-driver-override"
	StepBindNative    Step = "bind-native"
)

// hostDrivers are the drivers a function of a GPU's IOMMU group may be bound to: the GPU's
// own functions (display, audio, USB-C and its UCSI controller) and vfio-pci.
var hostDrivers = map[string]bool{
	"nvidia": true, "nvidia-drm": true, "nouveau": true, "snd_hda_intel": true, "xhci_hcd": true,
	"nvidia-gpu": true, DriverVFIO: true,
}

// nameRE is what a name read back from sysfs must look like before it becomes part of a path.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]*$`)

// SysfsBinder is the Binder over sysfs. It is safe for concurrent use; binds and unbinds are
// serialized.
type SysfsBinder struct {
	fs           FS
	sysfs, dev   string
	proc         string
	native       string
	timeout      time.Duration
	poll         time.Duration
	inUse        []func(ctx context.Context, g *Group) error
	hook         func(step Step, function string) error
	mu           sync.Mutex
	allowDrivers map[string]bool
}

var _ Binder = (*SysfsBinder)(nil)

// Option configures a SysfsBinder.
type Option func(*SysfsBinder)

// WithFS sets the file access (default OSFS).
func WithFS(fsys FS) Option { return func(b *SysfsBinder) { b.fs = fsys } }

// WithRoots sets where sysfs, /dev and /proc are (defaults /sys, /dev, /proc); a plugin
// running in a container passes the host's mounts.
func WithRoots(sysfs, dev, proc string) Option {
	return func(b *SysfsBinder) { b.sysfs, b.dev, b.proc = sysfs, dev, proc }
}

// WithNativeDriver sets the driver a GPU goes back to on Unbind (default nvidia).
func WithNativeDriver(name string) Option { return func(b *SysfsBinder) { b.native = name } }

// WithDeviceTimeout sets how long Bind waits for /dev/vfio/<group> (default 10 s) and how often
// it looks (default 50 ms).
func WithDeviceTimeout(timeout, poll time.Duration) Option {
	return func(b *SysfsBinder) { b.timeout, b.poll = timeout, poll }
}

// WithInUseCheck adds a check Bind runs before it changes anything: an error refuses the bind
// (wrap ErrInUse to say the GPU is in use). The kubelet plugin uses it for what only it knows,
// such as claims prepared on the GPU.
func WithInUseCheck(check func(ctx context.Context, g *Group) error) Option {
	return func(b *SysfsBinder) {
		if check != nil {
			b.inUse = append(b.inUse, check)
		}
	}
}

// WithStepHook calls hook before each host write, with the step and the function's address; an
// error stops the bind or unbind there, as a failed write would. Crash tests use it.
func WithStepHook(hook func(step Step, function string) error) Option {
	return func(b *SysfsBinder) { b.hook = hook }
}

// NewSysfsBinder returns a SysfsBinder with the host's roots unless options say otherwise.
func NewSysfsBinder(opts ...Option) (*SysfsBinder, error) {
	b := &SysfsBinder{fs: OSFS{}, sysfs: "/sys", dev: "/dev", proc: "/proc", native: DefaultNativeDriver,
		timeout: 10 * time.Second, poll: 50 * time.Millisecond, allowDrivers: hostDrivers}
	for _, o := range opts {
		o(b)
	}
	for name, root := range map[string]string{"sysfs": b.sysfs, "dev": b.dev, "proc": b.proc} {
		if !path.IsAbs(root) {
			return nil, fmt.Errorf("vfio: %s root %q: must be an absolute path", name, root)
		}
	}
	if !nameRE.MatchString(b.native) {
		return nil, fmt.Errorf("vfio: native driver %q: must be a driver name (letters, digits, _ . : -)", b.native)
	}
	if b.fs == nil {
		return nil, fmt.Errorf("vfio: WithFS(nil): want a file system")
	}
	if b.timeout <= 0 || b.poll <= 0 {
		return nil, fmt.Errorf("vfio: WithDeviceTimeout(%v, %v): both must be positive", b.timeout, b.poll)
	}
	return b, nil
}

// DevRoot returns the /dev root the binder waits for device nodes in.
func (b *SysfsBinder) DevRoot() string { return b.dev }

func (b *SysfsBinder) devicePath(addr string, elem ...string) string {
	return path.Join(append([]string{b.sysfs, "bus/pci/devices", addr}, elem...)...)
}

// Group implements Binder.
func (b *SysfsBinder) Group(_ context.Context, pciAddress string) (*Group, error) {
	addr, err := pciaddr.Canonical(pciAddress)
	if err != nil {
		return nil, fmt.Errorf("vfio: %w", err)
	}
	link, err := b.fs.Readlink(b.devicePath(addr, "iommu_group"))
	if err != nil {
		return nil, fmt.Errorf("vfio: GPU %s: no IOMMU group (is the IOMMU on? intel_iommu=on or amd_iommu=on): %w", addr, err)
	}
	id, err := strconv.Atoi(path.Base(link))
	if err != nil || id < 0 {
		return nil, fmt.Errorf("vfio: GPU %s: IOMMU group link %q does not end in a group number", addr, link)
	}
	members, err := b.fs.ReadDir(path.Join(b.sysfs, "kernel/iommu_groups", strconv.Itoa(id), "devices"))
	if err != nil {
		return nil, fmt.Errorf("vfio: GPU %s: IOMMU group %d: %w", addr, id, err)
	}
	g := &Group{ID: id, GPU: addr}
	for _, m := range members {
		fa, err := pciaddr.Canonical(m)
		if err != nil || fa != m {
			return nil, fmt.Errorf("vfio: GPU %s: IOMMU group %d lists %q, not a canonical PCI address", addr, id, m)
		}
		f, err := b.function(fa)
		if err != nil {
			return nil, fmt.Errorf("vfio: GPU %s: IOMMU group %d: %w", addr, id, err)
		}
		g.Functions = append(g.Functions, f)
	}
	if !slicesContainsAddr(g.Functions, addr) {
		return nil, fmt.Errorf("vfio: GPU %s: IOMMU group %d does not list the GPU", addr, id)
	}
	return g, nil
}

func slicesContainsAddr(fs []Function, addr string) bool {
	for _, f := range fs {
		if f.Address == addr {
			return true
		}
	}
	return false
}

// function reads one function's class, driver and driver_override.
func (b *SysfsBinder) function(addr string) (Function, error) {
	f := Function{Address: addr}
	if class, err := b.fs.ReadFile(b.devicePath(addr, "class")); err == nil {
		f.Class = strings.TrimSpace(string(class))
	}
	var err error
	if f.Driver, err = b.driverOf(addr); err != nil {
		return f, err
	}
	if o, err := b.fs.ReadFile(b.devicePath(addr, "driver_override")); err == nil {
		if s := strings.TrimSpace(string(o)); s != "(null)" {
			f.Override = s
		}
	}
	return f, nil
}

// driverOf returns the driver a function is bound to, "" when none.
func (b *SysfsBinder) driverOf(addr string) (string, error) {
	link, err := b.fs.Readlink(b.devicePath(addr, "driver"))
	if err != nil {
		return "", nil // no driver link: unbound
	}
	name := path.Base(link)
	if !nameRE.MatchString(name) {
		return "", fmt.Errorf("function %s: driver link %q does not name a driver", addr, link)
	}
	return name, nil
}

// write makes one host write after the step hook lets it.
func (b *SysfsBinder) write(step Step, function, file, data string) error {
	if b.hook != nil {
		if err := b.hook(step, function); err != nil {
			return fmt.Errorf("function %s: %s: %w", function, step, err)
		}
	}
	if err := b.fs.WriteFile(file, []byte(data)); err != nil {
		return fmt.Errorf("function %s: %s: write %q to %s: %w", function, step, data, file, err)
	}
	return nil
}

// Bind implements Binder.
func (b *SysfsBinder) Bind(ctx context.Context, pciAddress string) (*Group, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	logger := klog.FromContext(ctx)
	g, err := b.Group(ctx, pciAddress)
	if err != nil {
		return nil, err
	}
	if !g.Bound() {
		if err := b.checkInUse(ctx, g); err != nil {
			return nil, err
		}
		for i, f := range g.Functions {
			if f.Bridge() || f.Driver == DriverVFIO {
				continue
			}
			logger.V(2).Info("Binding to vfio-pci", "function", f.Address, "driver", f.Driver, "iommuGroup", g.ID)
			if err := b.bindFunction(f); err != nil {
				return nil, b.rollback(ctx, g.Functions[:i+1], fmt.Errorf("vfio: GPU %s: IOMMU group %d: %w", g.GPU, g.ID, err))
			}
		}
	}
	if err := b.waitDevice(ctx, g.ID); err != nil {
		return nil, b.rollback(ctx, g.Functions, fmt.Errorf("vfio: GPU %s: %w", g.GPU, err))
	}
	node := path.Join(b.dev, "vfio", strconv.Itoa(g.ID))
	major, minor, err := b.fs.CharDevice(node)
	if err != nil {
		return nil, b.rollback(ctx, g.Functions, fmt.Errorf("vfio: GPU %s: %w", g.GPU, err))
	}
	if g, err = b.Group(ctx, g.GPU); err != nil {
		return nil, err
	}
	g.Major, g.Minor = major, minor
	return g, nil
}

func (b *SysfsBinder) bindFunction(f Function) error {
	if err := b.write(StepSetOverride, f.Address, b.devicePath(f.Address, "driver_override"), DriverVFIO); err != nil {
		return err
	}
	if f.Driver != "" {
		if err := b.write(StepUnbind, f.Address, b.devicePath(f.Address, "driver/unbind"), f.Address); err != nil {
			return err
		}
	}
	if err := b.write(StepProbe, f.Address, path.Join(b.sysfs, "bus/pci/drivers_probe"), f.Address); err != nil {
		return err
	}
	if d, err := b.driverOf(f.Address); err != nil || d != DriverVFIO {
		return fmt.Errorf("function %s: bound to %q after drivers_probe, want %s (is the vfio-pci module loaded?)", f.Address, d, DriverVFIO)
	}
	return nil
}

// rollback gives the functions back to the drivers they had and returns cause, with the
// rollback's own failure added.
func (b *SysfsBinder) rollback(ctx context.Context, fs []Function, cause error) error {
	var errs []error
	for _, f := range fs {
		if f.Bridge() || f.Driver == DriverVFIO {
			continue // bridges are never bound; a function already on vfio-pci stays there
		}
		if err := b.restore(f.Address, f.Driver); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		klog.FromContext(ctx).Error(errors.Join(errs...), "Rolling back a vfio-pci bind failed")
		return fmt.Errorf("%w (rollback failed too: %w)", cause, errors.Join(errs...))
	}
	return cause
}

// restore clears a function's driver_override and gives it back to driver ("" leaves the choice
// to the kernel's probe), from whatever state a bind left it in.
func (b *SysfsBinder) restore(addr, driver string) error {
	f, err := b.function(addr)
	if err != nil {
		return err
	}
	if driver == DriverVFIO {
		driver = ""
	}
	if f.Override != "" {
		if err := b.write(StepClearOverride, addr, b.devicePath(addr, "driver_override"), "\n"); err != nil {
			return err
		}
	}
	if f.Driver == DriverVFIO {
		if err := b.write(StepUnbind, addr, b.devicePath(addr, "driver/unbind"), addr); err != nil {
			return err
		}
		f.Driver = ""
	}
	if f.Driver == "" {
		if err := b.write(StepProbe, addr, path.Join(b.sysfs, "bus/pci/drivers_probe"), addr); err != nil {
			return err
		}
	}
	if driver == "" {
		return nil
	}
	now, err := b.driverOf(addr)
	if err != nil || now == driver {
		return err
	}
	if now != "" {
		return fmt.Errorf("function %s: bound to %s after drivers_probe, want %s", addr, now, driver)
	}
	if err := b.write(StepBindNative, addr, path.Join(b.sysfs, "bus/pci/drivers", driver, "bind"), addr); err != nil {
		return err
	}
	if now, err = b.driverOf(addr); err != nil || now != driver {
		return fmt.Errorf("function %s: bound to %q after binding to %s", addr, now, driver)
	}
	return nil
}

// Unbind implements Binder.
func (b *SysfsBinder) Unbind(ctx context.Context, pciAddress string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.Group(ctx, pciAddress)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range g.Functions {
		driver := ""
		if f.Address == g.GPU {
			driver = b.native
		}
		// Done: a bridge, and a function on a driver other than vfio-pci without an override.
		// A function left unbound by an interrupted unbind is probed again.
		if f.Bridge() || (f.Driver != DriverVFIO && f.Override == "" && f.Driver != "") {
			continue
		}
		klog.FromContext(ctx).V(2).Info("Unbinding from vfio-pci", "function", f.Address, "driver", driver, "iommuGroup", g.ID)
		if err := b.restore(f.Address, driver); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vfio: GPU %s: IOMMU group %d: %w", g.GPU, g.ID, err)
	}
	return nil
}

// waitDevice waits for /dev/vfio/<group>.
func (b *SysfsBinder) waitDevice(ctx context.Context, id int) error {
	node := path.Join(b.dev, "vfio", strconv.Itoa(id))
	deadline := time.NewTimer(b.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(b.poll)
	defer tick.Stop()
	for {
		if _, err := b.fs.Stat(node); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", node, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("%s did not appear within %v after binding IOMMU group %d to vfio-pci", node, b.timeout, id)
		case <-tick.C:
		}
	}
}
