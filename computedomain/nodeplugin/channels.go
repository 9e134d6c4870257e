package nodeplugin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/computedomain"
)

// ChannelDevices makes the host's IMEX channel device nodes.
type ChannelDevices interface {
	// Ensure makes sure that the device nodes of the given channels exist on the host
	// (computedomain.ChannelDevicePath: character devices whose minor is the channel number)
	// and returns their major number.
	Ensure(ctx context.Context, channels []int) (major uint32, err error)
}

// The host paths HostChannels uses by default.
const (
	// DefaultDevRoot is the host's /dev.
	DefaultDevRoot = "/dev"
	// DefaultProcDevices lists the kernel's device majors.
	DefaultProcDevices = "/proc/devices"
	// channelFileMode is the mode of a channel device node: readable and writable by every user,
	// as the NVIDIA driver's own device nodes are by default, since a container's workload runs
	// as any user. What limits a channel to a domain's pods is which containers get the node (CDI
	// and the device cgroup), not its mode.
	channelFileMode = 0o666
	// channelDirMode is the mode of the channel directory, as /dev's directories have.
	channelDirMode = 0o755
)

// HostChannels is ChannelDevices on the host: it reads the major of the
// computedomain.ChannelProcName character device from /proc/devices and makes the missing
// nodes with mknod(2) under <dev root>/nvidia-caps-imex-channels. Nodes that exist are kept when
// they are character devices with the right numbers (the NVIDIA driver may have made them);
// anything else at their path is an error, not replaced. It needs CAP_MKNOD and the host's /dev.
type HostChannels struct {
	devRoot, procDevices string
}

var _ ChannelDevices = (*HostChannels)(nil)

// NewHostChannels returns ChannelDevices that make nodes under devRoot with the major read from
// procDevices; "" means DefaultDevRoot and DefaultProcDevices. Tests pass a temporary directory
// and a file of their own.
func NewHostChannels(devRoot, procDevices string) *HostChannels {
	return &HostChannels{devRoot: cmp.Or(devRoot, DefaultDevRoot), procDevices: cmp.Or(procDevices, DefaultProcDevices)}
}

// Ensure implements ChannelDevices.
func (h *HostChannels) Ensure(ctx context.Context, channels []int) (uint32, error) {
	major, err := h.major()
	if err != nil {
		return 0, err
	}
	dir := filepath.Join(h.devRoot, filepath.Base(computedomain.ChannelDevDir))
	if err := os.MkdirAll(dir, channelDirMode); err != nil {
		return 0, fmt.Errorf("create the IMEX channel directory: %w", err)
	}
	for _, n := range channels {
		made, err := ensureNode(filepath.Join(dir, "channel"+strconv.Itoa(n)), major, uint32(n))
		if err != nil {
			return 0, err
		}
		if made {
			klog.FromContext(ctx).V(2).Info("Created IMEX channel device node", "channel", n, "major", major)
		}
	}
	return major, nil
}

// major reads the character device major of the IMEX channels from the /proc/devices file.
func (h *HostChannels) major() (uint32, error) {
	data, err := os.ReadFile(h.procDevices)
	if err != nil {
		return 0, fmt.Errorf("read the device majors: %w", err)
	}
	return parseMajor(data, computedomain.ChannelProcName, h.procDevices)
}

// parseMajor finds name in the "Character devices:" section of a /proc/devices text.
func parseMajor(data []byte, name, path string) (uint32, error) {
	inChar := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasSuffix(line, ":"):
			inChar = line == "Character devices:"
			continue
		case !inChar:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || fields[1] != name {
			continue
		}
		major, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%s: character device %s has major %q, not a number", path, name, fields[0])
		}
		return uint32(major), nil
	}
	return 0, fmt.Errorf("%s lists no character device %s: is the NVIDIA driver loaded, with IMEX channels?", path, name)
}

// ensureNode makes the character device node path (major:minor) unless it exists, and says
// whether it made it. An existing file must be that device.
func ensureNode(path string, major, minor uint32) (bool, error) {
	err := unix.Mknod(path, unix.S_IFCHR|channelFileMode, int(unix.Mkdev(major, minor)))
	switch {
	case err == nil:
		// mknod's mode is cut by the umask: set it as meant.
		if err := os.Chmod(path, channelFileMode); err != nil {
			return true, fmt.Errorf("set the mode of %s: %w", path, err)
		}
		return true, nil
	case !errors.Is(err, fs.ErrExist):
		return false, fmt.Errorf("create IMEX channel device node %s (%d:%d): %w", path, major, minor, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, fmt.Errorf("inspect %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor {
		return false, fmt.Errorf("%s exists but is not the character device %d:%d (mode %#o, device %d:%d); remove it or load the NVIDIA driver that made it",
			path, major, minor, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	return false, nil
}
