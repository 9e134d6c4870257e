package kubenode

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/test/e2e/cmd/nvml-standin/standin"
)

// FakeDriverRoot lays out a fake NVIDIA driver installation in dir for gpus GPUs, as the
// reference driver's CDI specs expect one (cditest's layout: libraries, binaries, firmware,
// /proc/driver files, MIG capability minors), with real character-device nodes under dir/dev
// carrying the NVIDIA majors and minors. The specs name paths below dir, so containers get
// them bind-mounted for real. Opening a node fails (ENXIO: no NVIDIA kernel module); its
// presence and numbers are what a container is checked for. It needs root (mknod).
//
// Options add to the layout: WithNVMLStandIn installs a working NVML library, WithFakeIMEX the
// fake IMEX daemon and the IMEX channels' device major.
func FakeDriverRoot(dir string, gpus int, opts ...DriverRootOption) error {
	var c driverRootConfig
	for _, o := range opts {
		o(&c)
	}
	root, err := cditest.Build(dir, cditest.Layout{GPUs: gpus, CapsNodes: true, HostDriverRoot: dir})
	if err != nil {
		return fmt.Errorf("fake driver root in %s: %w", dir, err)
	}
	if err := makeDeviceNodes(dir, root); err != nil {
		return err
	}
	if c.standIn != nil {
		if err := installNVMLStandIn(dir, c.standIn, c.stateDir); err != nil {
			return fmt.Errorf("fake driver root in %s: %w", dir, err)
		}
	}
	if c.imex {
		if err := installFakeIMEX(dir); err != nil {
			return fmt.Errorf("fake driver root in %s: %w", dir, err)
		}
	}
	return nil
}

// makeDeviceNodes replaces the layout's placeholder files under dir/dev with character-device
// nodes of the numbers root gives them.
func makeDeviceNodes(dir string, root *cditest.DriverRoot) error {
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

// DriverRootOption changes what FakeDriverRoot lays out.
type DriverRootOption func(*driverRootConfig)

type driverRootConfig struct {
	standIn  *gputest.Machine
	stateDir string
	imex     bool
}

// WithNVMLStandIn makes the fake driver root's NVML a working library: the stand-in
// libnvidia-ml (test/e2e/cmd/nvml-standin, built with gcc) serving machine m. It is installed as
// a driver installs NVML on Debian, usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<version> (in place
// of the layout's placeholder, so CDI specs mount the real file) with the libnvidia-ml.so.1 link
// the reference driver loads it by, as an absolute link target the driver must resolve inside
// the root. The machine's state reports the root's driver version, whatever m's is.
//
// With stateDir "" the state is written beside the library. Otherwise it is written in
// stateDir, which must be writable where the library is loaded, and the file beside the library
// links to it: the chart mounts the driver root read-only, and the library writes the MIG
// changes it makes. A plugin's pod then needs stateDir mounted at the same path.
func WithNVMLStandIn(m *gputest.Machine, stateDir string) DriverRootOption {
	return func(c *driverRootConfig) { c.standIn, c.stateDir = m, stateDir }
}

// installNVMLStandIn builds the stand-in into the driver root dir and writes m's state.
func installNVMLStandIn(dir string, m *gputest.Machine, stateDir string) error {
	ctx := context.Background()
	hdr, err := standin.HeaderDir(ctx, "")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "nvml-standin")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	built, err := standin.Build(ctx, hdr, tmp)
	if err != nil {
		return err
	}
	libDir := filepath.Join(dir, cditest.DefaultLibDir)
	versioned := "libnvidia-ml.so." + cditest.DefaultVersion
	data, err := os.ReadFile(built)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(libDir, versioned), data, 0o755); err != nil {
		return fmt.Errorf("install the stand-in NVML: %w", err)
	}
	link := filepath.Join(libDir, standin.LibraryName)
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := os.Symlink(path.Join(cditest.DefaultLibDir, versioned), link); err != nil {
		return fmt.Errorf("install the stand-in NVML: %w", err)
	}
	s, err := standin.FromMachine(m)
	if err != nil {
		return err
	}
	s.DriverVersion, s.NVMLVersion = cditest.DefaultVersion, "13."+cditest.DefaultVersion
	if stateDir == "" {
		return s.Install(libDir)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	if err := s.Install(stateDir); err != nil {
		return err
	}
	return os.Symlink(filepath.Join(stateDir, standin.StateName), filepath.Join(libDir, standin.StateName))
}

// IMEXChannelMajor is the character device major WithFakeIMEX lists for
// nvidia-caps-imex-channels in the fake root's proc/devices: one no driver of this machine has,
// so that a channel node made with it opens nothing (ENXIO), like the GPU nodes.
const IMEXChannelMajor = 236

// WithFakeIMEX adds what a GB200 node's driver installation has for ComputeDomains: the fake
// nvidia-imex and nvidia-imex-ctl (package imextest's fakeimex, built with the go command) in
// usr/bin, this machine's dynamic loader at lib64/ld-linux-x86-64.so.2 (driver-root programs
// run through the root's own loader), and nvidia-caps-imex-channels with IMEXChannelMajor in
// proc/devices.
func WithFakeIMEX() DriverRootOption {
	return func(c *driverRootConfig) { c.imex = true }
}

// installFakeIMEX builds the fake IMEX programs into the driver root dir, copies the loader
// and registers the channel major.
func installFakeIMEX(dir string) error {
	bin := filepath.Join(dir, cditest.DefaultBinDir, "nvidia-imex")
	cmd := exec.Command("go", "build", "-buildmode=pie", "-o", bin, imextest.FakePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the fake nvidia-imex: %w\n%s", err, out)
	}
	// A hard link, not a symbolic one: the fake picks its role by the name it is started as,
	// and the daemon resolves links.
	if err := os.Link(bin, filepath.Join(dir, cditest.DefaultBinDir, "nvidia-imex-ctl")); err != nil {
		return fmt.Errorf("install the fake nvidia-imex-ctl: %w", err)
	}
	if err := copyLoader(dir); err != nil {
		return err
	}
	devices := filepath.Join(dir, "proc", "devices")
	data, err := os.ReadFile(devices)
	if err != nil {
		return err
	}
	const section = "Character devices:\n"
	line := fmt.Sprintf("%3d nvidia-caps-imex-channels\n", IMEXChannelMajor)
	out := strings.Replace(string(data), section, section+line, 1)
	if out == string(data) {
		return fmt.Errorf("%s has no %q section", devices, strings.TrimSpace(section))
	}
	return os.WriteFile(devices, []byte(out), 0o444)
}

// copyLoader copies this machine's dynamic loader into the driver root dir, where a driver
// installation of x86-64 Debian has it.
func copyLoader(dir string) error {
	const loader = "lib64/ld-linux-x86-64.so.2"
	host, err := filepath.EvalSymlinks("/" + loader)
	if err != nil {
		return fmt.Errorf("this machine's dynamic loader: %w", err)
	}
	data, err := os.ReadFile(host)
	if err != nil {
		return err
	}
	to := filepath.Join(dir, loader)
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}
