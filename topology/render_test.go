package topology_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestRenderGolden keeps testdata/<machine>.golden, the rendering of every fake machine that
// docs/hardware.md compares with NVIDIA's published nvidia-smi topo -m output, in step with the
// code. The files document; correctness is tested against the published facts in
// TestDiscoverMatrix and TestIslands.
func TestRenderGolden(t *testing.T) {
	for _, name := range gputest.Machines() {
		t.Run(name, func(t *testing.T) {
			got := topology.Render(discover(t, name))
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("Render (-%s +got):\n%s", path, diff)
			}
		})
	}
}

// Structural checks that do not depend on the golden files.
func TestRenderShape(t *testing.T) {
	out := topology.Render(discover(t, "dgx-a100-40gb"))
	lines := strings.Split(out, "\n")
	if got := strings.Fields(lines[0]); !cmp.Equal(got, []string{"GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5", "GPU6", "GPU7", "NUMA", "Affinity"}) {
		t.Errorf("header %q", lines[0])
	}
	wantNUMA := []string{"3", "3", "1", "1", "7", "7", "5", "5"}
	for i := range 8 {
		f := strings.Fields(lines[1+i])
		if len(f) != 10 || f[0] != "GPU"+string(rune('0'+i)) || f[1+i] != "X" || f[9] != wantNUMA[i] {
			t.Errorf("row %d = %q", i, lines[1+i])
		}
	}
	for _, s := range []string{"PCIe paths under the NVLinks:", "0000:bd:00.0  pci0000:b7 (derived)  12", "Legend:", "  NV#"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if pcieOnly := topology.Render(discover(t, "l4x8")); strings.Contains(pcieOnly, "under the NVLinks") || strings.Contains(pcieOnly, "NVLink domains") || strings.Contains(pcieOnly, "NVLink islands") {
		t.Errorf("PCIe-only machine renders NVLink sections:\n%s", pcieOnly)
	}
	if !strings.HasSuffix(out, "\n") {
		t.Error("output does not end with a newline")
	}
}
