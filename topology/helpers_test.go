package topology_test

import (
	"testing"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// discover is the topology of a fake machine, PCIe roots derived from NVML.
func discover(t testing.TB, name string, opts ...gputest.Option) *topology.Topology {
	t.Helper()
	m, err := gputest.New(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
	if err != nil {
		t.Fatal(err)
	}
	return topo
}
