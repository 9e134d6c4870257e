package draplugin

import (
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/mig"

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

// newDeviceIndex indexes every device the plugin may be asked to prepare. A GPU published as
// dynamic partitions is indexed as if it had no instances — every placement and the whole GPU —
// because what is published of it changes with the instances present (see Resources), while a
// claim may name any of them.
func newDeviceIndex(b *gpudra.Builder, inv *gpu.Inventory) (*deviceIndex, error) {
	pub, err := b.Published(inv)
	if err != nil {
		return nil, fmt.Errorf("build devices: %w", err)
	}
	partitioned := map[string]bool{}
	for _, d := range pub {
		if d.Partition != nil {
			partitioned[d.GPU.UUID] = true
		}
	}
	if len(partitioned) > 0 {
		empty := *inv
		empty.GPUs = slices.Clone(inv.GPUs)
		for i := range empty.GPUs {
			if partitioned[empty.GPUs[i].UUID] {
				empty.GPUs[i].MIGDevices = nil
			}
		}
		if pub, err = b.Published(&empty); err != nil {
			return nil, fmt.Errorf("build devices: %w", err)
		}
	}
	ix := &deviceIndex{byName: make(map[string]gpudra.PublishedDevice, len(pub)), names: make([]string, 0, len(pub)),
		gpus: map[string]*gpu.GPU{}, partitioned: partitioned}
	for i := range inv.GPUs {
		ix.gpus[inv.GPUs[i].UUID] = &inv.GPUs[i]
	}
	for _, d := range pub {
		ix.byName[d.Name] = d
		ix.names = append(ix.names, d.Name)
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

// deviceModels returns a MIG model lookup that answers with the geometry the inventory's GPUs
// reported (gpu.GPU.MIGGeometry), so that instances are created with the same model the slices
// were built with, and falls back to lookup for products that reported none.
func deviceModels(inv *gpu.Inventory, lookup func(productName string) (*mig.Model, error)) func(string) (*mig.Model, error) {
	return func(product string) (*mig.Model, error) {
		for i := range inv.GPUs {
			g := &inv.GPUs[i]
			if g.ProductName == product && g.MIGGeometry != nil && g.MIGGeometry.Model != nil {
				return g.MIGGeometry.Model, nil
			}
		}
		return lookup(product)
	}
}

// geometries returns the distinct MIG geometries of the inventory, one per product.
func geometries(inv *gpu.Inventory) map[string]*gpu.MIGGeometry {
	out := map[string]*gpu.MIGGeometry{}
	for i := range inv.GPUs {
		if g := inv.GPUs[i]; g.MIGGeometry != nil {
			out[g.ProductName] = g.MIGGeometry
		}
	}
	return out
}

// logCatalogDifferences says once per product where the mig catalog differs from what the GPUs
// report, and when a GPU would not report its geometry (the catalog is used then).
func logCatalogDifferences(logger klog.Logger, inv *gpu.Inventory) {
	for product, geo := range geometries(inv) {
		if geo.Err != nil {
			logger.Info("MIG geometry could not be read from the GPU; using the built-in catalog", "product", product, "err", geo.Err)
			continue
		}
		if len(geo.CatalogDifferences) == 0 {
			continue
		}
		diffs := make([]string, len(geo.CatalogDifferences))
		for i, d := range geo.CatalogDifferences {
			diffs[i] = d.String()
		}
		logger.Info("MIG catalog differs from the GPU; using the GPU's values", "product", product, "differences", diffs)
	}
}

// catalogDifferences counts the catalog differences per model, property and profile, for the
// metric.
func catalogDifferences(inv *gpu.Inventory) []mig.Difference {
	var out []mig.Difference
	for _, geo := range geometries(inv) {
		out = append(out, geo.CatalogDifferences...)
	}
	return out
}

// logEnumerationFailures says which GPUs failed to enumerate and are not served.
func logEnumerationFailures(logger klog.Logger, inv *gpu.Inventory) {
	for _, e := range inv.Errors {
		logger.Error(e, "GPU failed to enumerate; it is not published, the rest of the node serves, and claims prepared on it are kept",
			"index", e.Index, "uuid", e.UUID, "op", e.Op)
	}
}
