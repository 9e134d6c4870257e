package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/vfio"
)

// passthroughFlags are serve's flags for passing GPUs through to virtual machines.
type passthroughFlags struct {
	enabled            bool
	sysfsRoot, devRoot string
}

func (f *passthroughFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.enabled, "passthrough", false, "also publish every GPU whose IOMMU group is known as a vfio device (DeviceClass vfio.gpu.nvidia.com) and bind its IOMMU group to vfio-pci for the claims that get it (KubeVirt, Kata); "+
		"needs the IOMMU on and the vfio-pci module loaded (docs/install.md, \"GPU passthrough\")")
	fs.StringVar(&f.sysfsRoot, "sysfs-root", "/sys", "with --passthrough: where the host's sysfs is mounted")
	fs.StringVar(&f.devRoot, "vfio-dev-root", "/dev", "with --passthrough: where the host's /dev is mounted (the plugin waits for <dir>/vfio/<group>)")
}

// passthrough is what --passthrough adds to the plugin: the slice option and the binder.
type passthrough struct {
	options []gpudra.Option
	binder  vfio.Binder
}

// setup returns the slice option and binder of --passthrough (nothing without it). On a fake
// machine the GPUs sit on a fake PCI host under the state directory, kept across restarts,
// each with an audio function, in IOMMU group fakeIOMMUGroup(minor). procRoot is serve's
// --proc-root, where the host's /proc is (open GPU handles, MIG instances).
func (f *passthroughFlags) setup(ctx context.Context, inv *gpu.Inventory, fake bool, stateDir, procRoot string) (passthrough, error) {
	if !f.enabled {
		return passthrough{}, nil
	}
	opts := []vfio.Option{vfio.WithRoots(f.sysfsRoot, f.devRoot, procRoot)}
	if fake {
		host, err := fakePCIHost(inv, filepath.Join(stateDir, "fake-pci"))
		if err != nil {
			return passthrough{}, err
		}
		opts = []vfio.Option{vfio.WithFS(host), vfio.WithRoots(host.SysfsRoot(), host.DevRoot(), host.ProcRoot())}
	} else if _, err := os.Stat(filepath.Join(f.sysfsRoot, "bus/pci/drivers", vfio.DriverVFIO)); err != nil {
		return passthrough{}, fmt.Errorf("--passthrough: the vfio-pci driver is not loaded (no %s): run modprobe vfio-pci on the node", filepath.Join(f.sysfsRoot, "bus/pci/drivers", vfio.DriverVFIO))
	}
	b, err := vfio.NewSysfsBinder(opts...)
	if err != nil {
		return passthrough{}, fmt.Errorf("--passthrough: %w", err)
	}
	groups := iommuGroups(ctx, b, inv)
	klog.FromContext(ctx).Info("Publishing GPUs for passthrough", "gpus", len(groups), "of", len(inv.GPUs))
	return passthrough{binder: b, options: []gpudra.Option{passthroughOption(groups)}}, nil
}

// iommuGroups looks up the IOMMU group of every GPU of inv (by GPU UUID); a GPU whose group
// cannot be found is left out, with a log line.
func iommuGroups(ctx context.Context, b vfio.Binder, inv *gpu.Inventory) map[string]int {
	groups := map[string]int{}
	for _, g := range inv.GPUs {
		grp, err := b.Group(ctx, g.PCIBusID)
		if err != nil {
			klog.FromContext(ctx).Info("Not publishing GPU for passthrough", "gpu", g.UUID, "reason", err.Error())
			continue
		}
		groups[g.UUID] = grp.ID
	}
	return groups
}

// passthroughOption publishes the GPUs of groups (GPU UUID → IOMMU group) for passthrough.
func passthroughOption(groups map[string]int) gpudra.Option {
	return gpudra.WithPassthrough(func(g *gpu.GPU) (int, bool) {
		id, ok := groups[g.UUID]
		return id, ok
	})
}

// fakeIOMMUGroup is the IOMMU group of a fake machine's GPU with the given minor on the fake PCI
// host (fakePCIHost), which render and check publish too.
func fakeIOMMUGroup(minor int) int { return 100 + minor }

// offlinePassthrough is --passthrough of render and check: the option that publishes GPUs for
// passthrough as serve --passthrough would on this node, without binding anything. A fake
// machine's GPUs are in the fake PCI host's groups; a real node's are read from /sys.
func offlinePassthrough(ctx context.Context, inv *gpu.Inventory, fake bool) (gpudra.Option, error) {
	if fake {
		groups := map[string]int{}
		for _, g := range inv.GPUs {
			groups[g.UUID] = fakeIOMMUGroup(g.Minor)
		}
		return passthroughOption(groups), nil
	}
	b, err := vfio.NewSysfsBinder()
	if err != nil {
		return nil, fmt.Errorf("--passthrough: %w", err)
	}
	return passthroughOption(iommuGroups(ctx, b, inv)), nil
}

// fakePCIHost builds a fake PCI host with the inventory's GPUs in dir, or continues the one an
// earlier start left there: a real host keeps its drivers' bindings when the plugin restarts,
// and a restarted plugin must find a GPU it bound to vfio-pci still bound.
func fakePCIHost(inv *gpu.Inventory, dir string) (*gputest.PCIHost, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var funcs []gputest.PCIFunction
	for _, g := range inv.GPUs {
		bus, ok := strings.CutSuffix(strings.ToLower(g.PCIBusID), ".0")
		if !ok {
			return nil, errors.New("fake PCI host: GPU " + g.UUID + " is not function 0 of its device")
		}
		funcs = append(funcs, gputest.PassthroughGPU(bus, fakeIOMMUGroup(g.Minor), g.Minor)...)
	}
	return gputest.NewPCIHost(dir, funcs...)
}
