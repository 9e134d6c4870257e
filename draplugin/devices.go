package draplugin

import (
	"fmt"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
)

// deviceIndex knows what every published device is, as the slice builder publishes it: the
// plugin never parses device names.
type deviceIndex struct {
	byName map[string]gpudra.PublishedDevice
	// names are the published device names in publishing order.
	names []string
	// gpus maps GPU UUIDs to the inventory's GPUs.
	gpus map[string]*gpu.GPU
	// partitioned are the GPUs (by UUID) published as dynamic MIG partitions.
	partitioned map[string]bool
}

func newDeviceIndex(b *gpudra.Builder, inv *gpu.Inventory) (*deviceIndex, error) {
	pub, err := b.Published(inv)
	if err != nil {
		return nil, fmt.Errorf("build devices: %w", err)
	}
	ix := &deviceIndex{byName: make(map[string]gpudra.PublishedDevice, len(pub)), names: make([]string, 0, len(pub)),
		gpus: map[string]*gpu.GPU{}, partitioned: map[string]bool{}}
	for i := range inv.GPUs {
		ix.gpus[inv.GPUs[i].UUID] = &inv.GPUs[i]
	}
	for _, d := range pub {
		ix.byName[d.Name] = d
		ix.names = append(ix.names, d.Name)
		if d.Partition != nil {
			ix.partitioned[d.GPU.UUID] = true
		}
	}
	return ix, nil
}

// lookup returns what a published device is.
func (ix *deviceIndex) lookup(name string) (gpudra.PublishedDevice, bool) {
	d, ok := ix.byName[name]
	return d, ok
}

// gpuOf returns the UUID of the physical GPU of a published device, or of a GPU named by UUID.
func (ix *deviceIndex) gpuOf(nameOrUUID string) (string, bool) {
	if d, ok := ix.byName[nameOrUUID]; ok {
		return d.GPU.UUID, true
	}
	if _, ok := ix.gpus[nameOrUUID]; ok {
		return nameOrUUID, true
	}
	return "", false
}
