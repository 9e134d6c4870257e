package cdi_test

import (
	"testing"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
)

// BenchmarkGenerateWrite measures what NodePrepareResources pays for CDI per claim: generate and
// validate the spec of a claim with one GPU and one MIG device (reading the device nodes and the
// MIG capability files), then write it atomically with fsyncs.
func BenchmarkGenerateWrite(b *testing.B) {
	g, _ := generator(b, cditest.Layout{})
	w := writer(b, b.TempDir())
	claim := cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{
		{Name: "gpu-0", GPUMinor: 0, Edits: mpsEdits("50", "0=20G")},
		{Name: "gpu-1-mig-1g5gb-19-0", GPUMinor: 1, MIG: &cdi.MIGInstanceIDs{GI: 7}},
	}}
	b.ReportAllocs()
	for b.Loop() {
		cs, err := g.Generate(claim)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Write(cs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenerate is BenchmarkGenerateWrite without the file write.
func BenchmarkGenerate(b *testing.B) {
	g, _ := generator(b, cditest.Layout{})
	claim := cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{
		{Name: "gpu-0", GPUMinor: 0, Edits: mpsEdits("50", "0=20G")},
		{Name: "gpu-1-mig-1g5gb-19-0", GPUMinor: 1, MIG: &cdi.MIGInstanceIDs{GI: 7}},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Generate(claim); err != nil {
			b.Fatal(err)
		}
	}
}
