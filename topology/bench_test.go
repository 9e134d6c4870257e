package topology_test

import (
	"testing"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

func BenchmarkDiscover(b *testing.B) {
	m, err := gputest.New("dgx-h100")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBestSet(b *testing.B) {
	topo := discover(b, "dgx-h100")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := topology.BestSet(topo, 4, nil); err != nil {
			b.Fatal(err)
		}
	}
}
