package draplugintest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/internal/pciaddr"
	"github.com/gpudra/gpudra/vfio"
)

// PassthroughGroupBase is the IOMMU group of the GPU with minor 0 on a node built
// WithPassthrough; the GPU with minor m is in group PassthroughGroupBase+m.
const PassthroughGroupBase = 100

// WithPassthrough publishes every GPU of the node for passthrough to a virtual machine
// (gpudra.WithPassthrough): the node gets a fake PCI host (Node.PCI, a gputest.PCIHost under
// Dir) with each GPU at its PCI address beside an HD audio function, both in IOMMU group
// PassthroughGroupBase+minor, and its plugins a vfio binder over that host
// (draplugin.Config.Passthrough).
func WithPassthrough() NodeOption { return func(n *Node) { n.passthrough = true } }

// buildPCI makes the node's fake PCI host from its inventory and adds the passthrough slice
// option.
func (n *Node) buildPCI(inv *gpu.Inventory) error {
	var funcs []gputest.PCIFunction
	groups := map[string]int{}
	for _, g := range inv.GPUs {
		addr, err := pciaddr.Canonical(g.PCIBusID)
		if err != nil || !strings.HasSuffix(addr, ".0") {
			return fmt.Errorf("GPU %s: PCI address %q: want function 0 of a device", g.UUID, g.PCIBusID)
		}
		groups[g.UUID] = PassthroughGroupBase + g.Minor
		funcs = append(funcs, gputest.PassthroughGPU(strings.TrimSuffix(addr, ".0"), groups[g.UUID], g.Minor)...)
	}
	n.pciFuncs = funcs
	if err := n.newPCIHost(); err != nil {
		return err
	}
	n.SliceOptions = append(n.SliceOptions, gpudra.WithPassthrough(func(g *gpu.GPU) (int, bool) {
		group, ok := groups[g.UUID]
		return group, ok
	}))
	return nil
}

// newPCIHost opens the node's PCI host: its tree under Dir continues (WithPersistence: a
// process killed in a bind left it so); Reboot starts it afresh.
func (n *Node) newPCIHost() error {
	dir := filepath.Join(n.Dir, "pci")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	host, err := gputest.NewPCIHost(dir, n.pciFuncs...)
	if err != nil {
		return err
	}
	n.PCI = host
	return nil
}

// rebootPCI gives every PCI function back to its own driver, as a reboot does.
func (n *Node) rebootPCI() error {
	if n.PCI == nil {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(n.Dir, "pci")); err != nil {
		return err
	}
	return n.newPCIHost()
}

// passthroughConfig gives a plugin configuration the node's vfio binder.
func (n *Node) passthroughConfig(cfg *draplugin.Config) error {
	if n.PCI == nil {
		return nil
	}
	b, err := vfio.NewSysfsBinder(vfio.WithFS(n.PCI), vfio.WithRoots(n.PCI.SysfsRoot(), n.PCI.DevRoot(), n.PCI.ProcRoot()),
		vfio.WithDeviceTimeout(5*time.Second, time.Millisecond))
	if err != nil {
		return err
	}
	cfg.Passthrough = b
	return nil
}
