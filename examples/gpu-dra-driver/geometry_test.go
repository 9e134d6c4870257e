package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/mig"
)

// TestPrintMIGGeometry: inventory --mig-geometry says per product whether it has MIG, the
// geometry its GPUs report, and each difference from the built-in catalog; a GPU that would not
// report its geometry is named with the error, and the catalog is said to be used.
func TestPrintMIGGeometry(t *testing.T) {
	cases := []struct {
		name    string
		machine string
		opts    []gputest.Option
		want    []string
	}{
		{name: "catalog agrees", machine: "dgx-a100-40gb",
			want: []string{"NVIDIA A100-SXM4-40GB (GPU 0, 1, 2, 3, 4, 5, 6, 7): MIG geometry read from the GPU: 8 memory slices, 7 compute slices, 7 GPU-instance profiles; the catalog agrees"}},
		{name: "no MIG", machine: "l4x8", want: []string{"NVIDIA L4 (GPU 0, 1, 2, 3, 4, 5, 6, 7): no MIG"}},
		{name: "a profile differs", machine: "a30x4",
			opts: []gputest.Option{gputest.WithMIGProfileEdit("1g.6gb", func(p *mig.GIProfile) { p.MemoryMiB = 5888 })},
			want: []string{
				"NVIDIA A30 (GPU 0, 1, 2, 3): MIG geometry read from the GPU: 4 memory slices, 4 compute slices, 5 GPU-instance profiles; 1 differences from the catalog (the GPU's values are used):",
				"  profiles[1g.6gb].memoryMiB: table 5952, live 5888",
			}},
		{name: "geometry unreadable", machine: "a30x4",
			opts: []gputest.Option{gputest.WithFaultAfter("GetGpuInstanceProfileInfo", 0, nvml.ERROR_UNKNOWN)},
			want: []string{"NVIDIA A30 (GPU 0, 1, 2, 3): MIG geometry could not be read from the GPU (the built-in catalog is used): "}},
		{name: "a GPU not enumerated", machine: "l4x8",
			opts: []gputest.Option{gputest.WithFault("GetUUID", 2, nvml.ERROR_GPU_IS_LOST)},
			want: []string{"NVIDIA L4 (GPU 0, 2, 3, 4, 5, 6, 7): no MIG", "GPU 1 not enumerated: gpu 1: GetUUID: ERROR_GPU_IS_LOST"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := gputest.New(tc.machine, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := nvmlgpu.Enumerate(context.Background(), m, nvmlgpu.SkipFailedGPUs(true))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := printMIGGeometry(&out, inv); err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			// An unreadable geometry's error text is NVML's; compare up to it.
			if len(got) == len(tc.want) {
				for i := range got {
					if strings.HasSuffix(tc.want[i], ": ") && strings.HasPrefix(got[i], tc.want[i]) {
						got[i] = tc.want[i]
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("--mig-geometry output (-want +got):\n%s", diff)
			}
		})
	}
}
