package nodeplugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpudra/gpudra/topology"
)

// ErrNoClique says that a node's GPUs put it in no NVLink clique: it has no GPUs, a GPU's fabric
// registration has not completed successfully, or its GPUs are in different cliques.
var ErrNoClique = errors.New("the node is in no NVLink clique")

// Fabric reports the NVLink fabric membership of the node's GPUs. It is called whenever the
// plugin lists its devices and on every prepare, so that a node whose fabric registration
// completes (or fails) later is seen then.
type Fabric interface {
	// GPUs returns the node's GPUs. A GPU's Fabric is nil unless its fabric registration is
	// COMPLETED with status SUCCESS in a non-zero cluster (nvmltopology.Discover's rule).
	GPUs(ctx context.Context) ([]topology.GPU, error)
}

// TopologyFabric is a Fabric over topology discovery: wire nvmltopology.Discover on real NVML, or
// on a gputest machine in tests, as
//
//	nodeplugin.TopologyFabric(func(context.Context) (*topology.Topology, error) { return nvmltopology.Discover(lib) })
//
// The function keeps this package free of NVML's bindings (and of cgo).
type TopologyFabric func(ctx context.Context) (*topology.Topology, error)

var _ Fabric = TopologyFabric(nil)

// GPUs implements Fabric.
func (f TopologyFabric) GPUs(ctx context.Context) ([]topology.GPU, error) {
	t, err := f(ctx)
	if err != nil {
		return nil, fmt.Errorf("discover the GPUs' NVLink fabric: %w", err)
	}
	return t.GPUs, nil
}

// Clique returns the NVLink clique of a node, "<cluster UUID>.<clique ID>"
// (topology.Fabric.DomainID), when every one of its GPUs is registered in that clique. Otherwise
// it returns an error wrapping ErrNoClique that names the first GPU that keeps the node out.
func Clique(gpus []topology.GPU) (string, error) {
	if len(gpus) == 0 {
		return "", fmt.Errorf("%w: it has no GPUs", ErrNoClique)
	}
	var first *topology.Fabric
	for _, g := range gpus {
		switch {
		case g.Fabric == nil:
			return "", fmt.Errorf("%w: GPU %d (%s) has not completed its fabric registration successfully", ErrNoClique, g.Index, g.UUID)
		case first == nil:
			first = g.Fabric
		case *g.Fabric != *first:
			return "", fmt.Errorf("%w: GPU %d is in clique %s, GPU %d in %s", ErrNoClique, g.Index, g.Fabric.DomainID(), gpus[0].Index, first.DomainID())
		}
	}
	return first.DomainID(), nil
}
