package cdi_test

import (
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
)

// TestWritersShareADirectory: writers of different kinds in one spec directory (two DRA drivers
// on a node sharing /var/run/cdi) list and prune only their own specs, also when the file name
// prefixes of their kinds are the same ("example.com-accel-claim_" for both example.com-accel/claim
// and example.com/accel-claim), and a spec of a claim both drivers prepared survives the other's
// prune. An undecodable file with a writer's name (a torn write) is still that writer's to list
// and prune.
func TestWritersShareADirectory(t *testing.T) {
	const (
		shared  = "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01"
		orphanA = "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a02"
		orphanB = "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a03"
		torn    = "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a04"
	)
	type kind struct{ vendor, class string }
	cases := []struct {
		name string
		a, b kind
		// same: the two kinds give the same file names, so they cannot both have a spec of
		// one claim; only a's orphan is written then.
		same bool
	}{
		{name: "GPU and accel drivers", a: kind{cdi.DefaultVendor, cdi.DefaultClass}, b: kind{"accel.example.com", "claim"}},
		{name: "same vendor, other class", a: kind{"example.com", "gpu"}, b: kind{"example.com", "accel"}},
		{name: "ambiguous file name prefix", a: kind{"example.com-accel", "claim"}, b: kind{"example.com", "accel-claim"}, same: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writers := map[string]*cdi.Writer{}
			for name, k := range map[string]kind{"a": tc.a, "b": tc.b} {
				w, err := cdi.NewWriter(cdi.WithSpecDir(dir), cdi.WithWriterKind(k.vendor, k.class))
				if err != nil {
					t.Fatal(err)
				}
				writers[name] = w
			}
			a, b := writers["a"], writers["b"]
			write := func(w *cdi.Writer, uid string) {
				t.Helper()
				cs, err := cdi.NewClaimSpec(w.Kind(), uid, specs.ContainerEdits{},
					[]cdi.DeviceEdits{{Name: "dev-0", Edits: specs.ContainerEdits{Env: []string{"KIND=" + w.Kind()}}}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Write(cs); err != nil {
					t.Fatal(err)
				}
			}
			wantB := []string{orphanB}
			if tc.same {
				write(b, orphanB)
			} else {
				write(a, shared)
				write(b, shared)
				write(a, orphanA)
				write(b, orphanB)
				wantB = []string{shared, orphanB}
				p, err := a.SpecPath(torn)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(`{"cdiVersion": "0.5.0", "ki`), 0o644); err != nil {
					t.Fatal(err)
				}
			}

			listA, err := a.List()
			if err != nil {
				t.Fatal(err)
			}
			wantListA := []string{}
			if !tc.same {
				wantListA = []string{shared, orphanA, torn}
			}
			if diff := cmp.Diff(wantListA, listA, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("a.List (-want +got):\n%s", diff)
			}
			prunedA, err := a.Prune([]string{shared})
			if err != nil {
				t.Fatal(err)
			}
			var wantPrunedA []string
			if !tc.same {
				wantPrunedA = []string{orphanA, torn}
			}
			if diff := cmp.Diff(wantPrunedA, prunedA); diff != "" {
				t.Errorf("a.Prune removed (-want +got):\n%s", diff)
			}
			gotB, err := b.List()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantB, gotB); diff != "" {
				t.Errorf("b's specs after a's prune (-want +got):\n%s", diff)
			}
			for _, uid := range gotB {
				s, err := b.Read(uid)
				if err != nil || s.Kind != b.Kind() {
					t.Errorf("b's spec of %s after a's prune: %v, %+v", uid, err, s)
				}
			}
			if !tc.same {
				gotA, err := a.List()
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{shared}, gotA); diff != "" {
					t.Errorf("a's specs after its prune (-want +got):\n%s", diff)
				}
			}
			prunedB, err := b.Prune(nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantB, slices.Sorted(slices.Values(prunedB))); diff != "" {
				t.Errorf("b.Prune removed (-want +got):\n%s", diff)
			}
		})
	}
}
