package main

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/objects"
	"github.com/gpudra/gpudra/resourcepool"
	"github.com/gpudra/gpudra/topology"
)

// computeDomainSlices are the ResourceSlices the compute-domain plugin publishes on a node with
// topo's GPUs, by its rule (objects.Clique, objects.Devices, which its Driver.Devices uses): the
// channel and daemon devices when the GPUs are all in one NVLink clique, none otherwise. The
// plugin's package itself is not linked: it brings controller-runtime's client, and with it the
// informers of every API group, into every process of this binary.
func computeDomainSlices(nodeName string, topo *topology.Topology) ([]*resourceapi.ResourceSlice, error) {
	clique, err := objects.Clique(topo.GPUs)
	if err != nil {
		return nil, nil // objects.ErrNoClique, Clique's only error: the node publishes nothing
	}
	pool, err := resourcepool.New(nodeName, objects.Devices(clique))
	if err != nil {
		return nil, fmt.Errorf("compute-domain pool of node %s: %w", nodeName, err)
	}
	return resourcepool.ResourceSlices(computedomain.DriverName, nodeName, pool)
}
