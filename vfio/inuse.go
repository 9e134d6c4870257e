package vfio

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// checkInUse refuses a group whose GPU is in use: foreign drivers in the group, MIG instances,
// open handles, and the WithInUseCheck checks.
func (b *SysfsBinder) checkInUse(ctx context.Context, g *Group) error {
	for _, f := range g.Functions {
		if f.Bridge() || f.Driver == "" || b.allowDrivers[f.Driver] {
			continue
		}
		return fmt.Errorf("vfio: GPU %s: IOMMU group %d also holds function %s bound to %s, which is not a GPU's driver (allowed: nvidia, nvidia-drm, nouveau, snd_hda_intel, xhci_hcd, nvidia-gpu, vfio-pci): binding the group would take it from the host: %w",
			g.GPU, g.ID, f.Address, f.Driver, ErrInUse)
	}
	if gpu := g.function(g.GPU); gpu.Driver == "nvidia" {
		if err := b.checkNVIDIA(g); err != nil {
			return err
		}
	}
	for _, check := range b.inUse {
		if err := check(ctx, g); err != nil {
			return fmt.Errorf("vfio: GPU %s: %w", g.GPU, err)
		}
	}
	return nil
}

func (g *Group) function(addr string) Function {
	for _, f := range g.Functions {
		if f.Address == addr {
			return f
		}
	}
	return Function{}
}

// checkNVIDIA refuses a GPU the nvidia driver reports MIG instances on or that a process holds
// open.
func (b *SysfsBinder) checkNVIDIA(g *Group) error {
	minor, err := b.minor(g.GPU)
	if err != nil {
		return fmt.Errorf("vfio: GPU %s: cannot tell whether it is in use: %w", g.GPU, err)
	}
	gis, err := b.fs.ReadDir(path.Join(b.proc, "driver/nvidia/capabilities", "gpu"+strconv.Itoa(minor), "mig"))
	if err == nil {
		for _, gi := range gis {
			if strings.HasPrefix(gi, "gi") {
				return fmt.Errorf("vfio: GPU %s (minor %d) has MIG GPU instances (%s, ...): destroy them and turn MIG mode off first: %w", g.GPU, minor, gi, ErrInUse)
			}
		}
	}
	pids, err := b.openers(minor)
	if err != nil {
		return fmt.Errorf("vfio: GPU %s: listing processes that hold /dev/nvidia%d: %w", g.GPU, minor, err)
	}
	if len(pids) > 0 {
		return fmt.Errorf("vfio: GPU %s: /dev/nvidia%d is open in process(es) %s (CUDA, MPS or persistence daemons): %w",
			g.GPU, minor, strings.Join(pids, ", "), ErrInUse)
	}
	return nil
}

// minor reads the GPU's minor number from /proc/driver/nvidia/gpus/<addr>/information.
func (b *SysfsBinder) minor(addr string) (int, error) {
	file := path.Join(b.proc, "driver/nvidia/gpus", addr, "information")
	data, err := b.fs.ReadFile(file)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "Device Minor" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%s: Device Minor %q is not a number", file, strings.TrimSpace(v))
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s has no Device Minor line", file)
}

// openers returns the processes with /dev/nvidia<minor> open. Processes that vanish or whose
// descriptors cannot be read (another user's, without privilege) are skipped: the plugin runs
// privileged with the host's PID namespace, where it sees them all.
func (b *SysfsBinder) openers(minor int) ([]string, error) {
	entries, err := b.fs.ReadDir(b.proc)
	if err != nil {
		return nil, err
	}
	want := "/dev/nvidia" + strconv.Itoa(minor)
	var pids []string
	for _, pid := range entries {
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		fds, err := b.fs.ReadDir(path.Join(b.proc, pid, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if target, err := b.fs.Readlink(path.Join(b.proc, pid, "fd", fd)); err == nil && target == want {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}
