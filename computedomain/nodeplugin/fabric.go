package nodeplugin

import (
	"context"
	"fmt"

	"github.com/gpudra/gpudra/computedomain/objects"
	"github.com/gpudra/gpudra/topology"
)

// ErrNoClique says that a node's GPUs put it in no NVLink clique (objects.ErrNoClique).
var ErrNoClique = objects.ErrNoClique

// Fabric reports the NVLink fabric membership of the node's GPUs. It is read whenever the
// plugin lists its devices, on every prepare, and by Driver.WatchFabric, which republishes the
// node's devices when a fabric registration completes (or fails) after the plugin started.
type Fabric interface {
	// GPUs returns the node's GPUs. A GPU's Fabric is nil unless its fabric registration is
	// COMPLETED with status SUCCESS in a non-zero cluster (nvmltopology.Discover's rule).
	GPUs(ctx context.Context) ([]topology.GPU, error)
}

// FabricFunc is a Fabric from a function: wire nvmltopology.GPUs on real NVML, or on a gputest
// machine in tests, as
//
//	nodeplugin.FabricFunc(func(context.Context) ([]topology.GPU, error) { return nvmltopology.GPUs(lib) })
//
// nvmltopology.GPUs reads each GPU's fabric membership and nothing of its NVLinks or PCIe
// neighbours (nvmltopology.Discover would read those too, on every listing and prepare). The
// function keeps this package free of NVML's bindings (and of cgo).
type FabricFunc func(ctx context.Context) ([]topology.GPU, error)

var _ Fabric = FabricFunc(nil)

// GPUs implements Fabric.
func (f FabricFunc) GPUs(ctx context.Context) ([]topology.GPU, error) {
	gpus, err := f(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the GPUs' NVLink fabric: %w", err)
	}
	return gpus, nil
}

// Clique returns the NVLink clique of a node whose GPUs are gpus (objects.Clique).
func Clique(gpus []topology.GPU) (string, error) { return objects.Clique(gpus) }
