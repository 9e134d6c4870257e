package nvmltopology

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpudra/gpudra/topology"
)

// assignRoots fills PCIeRoot and PCIeRootSource of every GPU with a bus ID: from sysfs where it
// knows the device, else from the GPU's host-bridge group (see Discover).
func assignRoots(t *topology.Topology, c config) {
	n := len(t.GPUs)
	if c.sysfsRoot != "" {
		for i := range t.GPUs {
			g := &t.GPUs[i]
			if g.PCIBusID == "" {
				continue
			}
			if r, ok := sysfsPCIeRoot(c.sysfsRoot, g.PCIBusID); ok {
				g.PCIeRoot, g.PCIeRootSource = r, topology.RootSysfs
			}
		}
	}
	// Union-find over pairs that share a host bridge.
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			if sharesHostBridge(t.Links[i][j].PCIe) && t.GPUs[i].PCIBusID != "" && t.GPUs[j].PCIBusID != "" {
				a, b := find(i), find(j)
				parent[max(a, b)] = min(a, b) // the root of a group is its lowest index
			}
		}
	}
	groups := map[int][]int{}
	for i := range n {
		if t.GPUs[i].PCIBusID != "" {
			groups[find(i)] = append(groups[find(i)], i)
		}
	}
	for _, members := range groups { // members ascend; each group is handled independently
		name := ""
		for _, i := range members {
			if t.GPUs[i].PCIeRootSource == topology.RootSysfs {
				name = t.GPUs[i].PCIeRoot
				break
			}
		}
		if name == "" {
			name = synthesizedRoot(t.GPUs, members)
		}
		for _, i := range members {
			if t.GPUs[i].PCIeRootSource != topology.RootSysfs {
				t.GPUs[i].PCIeRoot, t.GPUs[i].PCIeRootSource = name, topology.RootDerived
			}
		}
	}
}

// sharesHostBridge reports whether two GPUs at level l hang off the same host bridge.
func sharesHostBridge(l topology.Level) bool {
	return l == topology.LevelPIX || l == topology.LevelPXB || l == topology.LevelPHB
}

// synthesizedRoot names a group "pci<domain>:<bus>" after its lowest (domain, bus).
func synthesizedRoot(gpus []topology.GPU, members []int) string {
	type db struct{ dom, bus uint64 }
	var all []db
	for _, i := range members {
		var x db
		var dev, fn uint64
		if _, err := fmt.Sscanf(gpus[i].PCIBusID, "%x:%x:%x.%x", &x.dom, &x.bus, &dev, &fn); err == nil {
			all = append(all, x)
		}
	}
	if len(all) == 0 {
		return ""
	}
	m := slices.MinFunc(all, func(a, b db) int {
		if c := cmp.Compare(a.dom, b.dom); c != 0 {
			return c
		}
		return cmp.Compare(a.bus, b.bus)
	})
	return fmt.Sprintf("pci%04x:%02x", m.dom, m.bus)
}
