package cdi_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestGolden writes each claim's spec and compares the file with testdata/<case>.golden; the
// CDI library must also load the file as a runtime would.
func TestGolden(t *testing.T) {
	for _, tc := range claimCases() {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := generator(t, tc.layout, tc.opts...)
			cs, err := g.Generate(tc.claim)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			p, err := writer(t, t.TempDir()).Write(cs)
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cdi -run TestGolden -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", golden, diff)
			}
			spec, err := cdiapi.ReadSpec(p, 0)
			if err != nil {
				t.Fatalf("CDI library rejects the written spec: %v", err)
			}
			for dev, id := range cs.DeviceIDs {
				found := false
				for _, d := range spec.Devices {
					if d.Name == uidPrefix(tc.claim.ClaimUID)+dev {
						found = true
					}
				}
				if !found {
					t.Errorf("device %s (%s) not in the spec", dev, id)
				}
			}
		})
	}
}

func uidPrefix(uid string) string { return uid + "-" }
