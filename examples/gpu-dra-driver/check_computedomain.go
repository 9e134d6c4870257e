package main

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/resourcepool"
	"github.com/gpudra/gpudra/topology"
)

// errCheckPreparesNothing answers the plugin's node-side calls, which check never makes: it
// only lists the devices the plugin would publish.
var errCheckPreparesNothing = errors.New("check prepares no claim")

// noPrepare is the Domains and ChannelDevices of a plugin that only lists its devices.
type noPrepare struct{}

var (
	_ nodeplugin.Domains        = noPrepare{}
	_ nodeplugin.ChannelDevices = noPrepare{}
)

// Domain implements nodeplugin.Domains.
func (noPrepare) Domain(context.Context, string, types.UID) (*cdv1beta1.ComputeDomain, error) {
	return nil, errCheckPreparesNothing
}

// Ensure implements nodeplugin.ChannelDevices.
func (noPrepare) Ensure(context.Context, []int) (uint32, error) { return 0, errCheckPreparesNothing }

// computeDomainSlices are the ResourceSlices the compute-domain plugin publishes on a node with
// topo's GPUs: its channel and daemon devices when the GPUs are all in one NVLink clique, none
// otherwise. The plugin's own Devices decides; its state directory is never touched, since
// listing devices prepares nothing.
func computeDomainSlices(ctx context.Context, nodeName string, topo *topology.Topology) ([]*resourceapi.ResourceSlice, error) {
	fabric := nodeplugin.TopologyFabric(func(context.Context) (*topology.Topology, error) { return topo, nil })
	d, err := nodeplugin.New(nodeplugin.Config{NodeName: nodeName, StateDir: "/nonexistent/check-lists-devices-only",
		Fabric: fabric, Domains: noPrepare{}, Channels: noPrepare{}})
	if err != nil {
		return nil, fmt.Errorf("compute-domain plugin of node %s: %w", nodeName, err)
	}
	devices, err := d.Devices(ctx)
	if err != nil || len(devices) == 0 {
		return nil, err
	}
	pool, err := resourcepool.New(nodeName, devices)
	if err != nil {
		return nil, fmt.Errorf("compute-domain pool of node %s: %w", nodeName, err)
	}
	return resourcepool.ResourceSlices(computedomain.DriverName, nodeName, pool)
}
