package cdi_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/internal/atomicfile"
)

func TestClaimUIDRejectedBeforeAnyPath(t *testing.T) {
	bad := []string{
		"", "claim-1", "../../etc/passwd", "0B7A4C4E-7A8E-4F0B-9A52-6C1D2E3F4A01",
		"0b7a4c4e7a8e4f0b9a526c1d2e3f4a01", "{0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01}",
		"urn:uuid:0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01", "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01/..",
		" 0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01",
	}
	dir := t.TempDir()
	w := writer(t, dir)
	g, _ := generator(t, cditest.Layout{GPUs: 1})
	for _, uid := range bad {
		t.Run(uid, func(t *testing.T) {
			checks := map[string]error{"ValidateClaimUID": cdi.ValidateClaimUID(uid), "Remove": w.Remove(uid)}
			_, checks["SpecPath"] = w.SpecPath(uid)
			_, checks["Read"] = w.Read(uid)
			_, checks["Write"] = w.Write(&cdi.ClaimSpec{ClaimUID: uid, Spec: &specs.Spec{}})
			_, checks["Generate"] = g.Generate(cdi.ClaimDevices{ClaimUID: uid, Devices: []cdi.Device{{Name: "gpu-0"}}})
			_, checks["DeviceID"] = g.DeviceID(uid, "gpu-0")
			for op, err := range checks {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("claim UID %q", uid)) {
					t.Errorf("%s(%q) = %v, want an error naming the UID", op, uid, err)
				}
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("spec directory not empty after rejected UIDs: %v", entries)
	}
	if err := cdi.ValidateClaimUID(uidGPU); err != nil {
		t.Errorf("ValidateClaimUID(%s) = %v", uidGPU, err)
	}
}

// writeClaim generates and writes the full-GPU spec of claim uid on minor gpu.
func writeClaim(t *testing.T, g *cdi.Generator, w *cdi.Writer, uid string, gpu int) *cdi.ClaimSpec {
	t.Helper()
	cs, err := g.Generate(cdi.ClaimDevices{ClaimUID: uid, Devices: []cdi.Device{{Name: "gpu-" + itoa(int64(gpu)), GPUMinor: gpu}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := w.Write(cs)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != cdi.SpecFileMode {
		t.Errorf("%s has mode %v, want %v", p, st.Mode().Perm(), cdi.SpecFileMode)
	}
	return cs
}

// visible returns what a runtime and a reconciler see: the devices the CDI cache resolves, its
// errors, and the writer's List.
func visible(t *testing.T, w *cdi.Writer) (devices []string, cacheErrs map[string][]error, listed []string) {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(w.Dir()), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	_ = cache.Refresh()
	listed, err = w.List()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return cache.ListDevices(), cache.GetErrors(), listed
}

func TestWriteListReadRemove(t *testing.T) {
	g, _ := generator(t, cditest.Layout{})
	w := writer(t, filepath.Join(t.TempDir(), "not", "yet", "there"))
	if uids, err := w.List(); err != nil || uids != nil {
		t.Fatalf("List of a missing directory = %v, %v; want nothing", uids, err)
	}
	a := writeClaim(t, g, w, uidMIG, 1)
	writeClaim(t, g, w, uidGPU, 0)
	writeClaim(t, g, w, uidGPU, 0) // rewriting is fine

	// Files that are not this writer's specs.
	others := map[string]string{
		"nvidia.yaml": "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [{name: x, containerEdits: {env: [A=b]}}]\n",
		"k8s.gpu.nvidia.com-claim_not-a-uid.json":                             "{}",
		"k8s.compute-domain.nvidia.com-claim_" + uidTS + ".json":              "{}",
		"k8s.gpu.nvidia.com-claim_" + uidTS + ".yaml":                         "{}",
		atomicfile.TempPrefix + "k8s.gpu.nvidia.com-claim_" + uidTS + ".json": "{",
	}
	for name, content := range others {
		if err := os.WriteFile(filepath.Join(w.Dir(), name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.List()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{uidGPU, uidMIG}, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	spec, err := w.Read(uidMIG)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if diff := cmp.Diff(a.Spec, spec); diff != "" {
		t.Errorf("Read (-written +read):\n%s", diff)
	}
	if err := w.Remove(uidMIG); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove(uidMIG); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := w.Read(uidMIG); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read after Remove = %v, want fs.ErrNotExist", err)
	}
	if got, _ := w.List(); !cmp.Equal(got, []string{uidGPU}) {
		t.Errorf("List after Remove = %v, want [%s]", got, uidGPU)
	}
	writeClaim(t, g, w, uidMPS, 2)
	writeClaim(t, g, w, uidTS, 3)
	pruned, err := w.Prune([]string{uidMPS, uidHook})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{uidGPU, uidTS}, pruned); diff != "" {
		t.Errorf("Prune removed (-want +got):\n%s", diff)
	}
	if got, _ := w.List(); !cmp.Equal(got, []string{uidMPS}) {
		t.Errorf("List after Prune = %v, want [%s]", got, uidMPS)
	}
	for name := range others {
		if _, err := os.Stat(filepath.Join(w.Dir(), name)); err != nil {
			t.Errorf("foreign file %s touched: %v", name, err)
		}
	}
}

func TestWriteRejectsForeignSpecs(t *testing.T) {
	g, _ := generator(t, cditest.Layout{GPUs: 2})
	cs, err := g.Generate(cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "gpu-0"}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w := writer(t, dir)
	other, err := cdi.NewWriter(cdi.WithSpecDir(dir), cdi.WithWriterKind("example.com", "gpu"))
	if err != nil {
		t.Fatal(err)
	}
	moved := *cs
	moved.ClaimUID = uidMIG
	emptied := *cs
	specCopy := *cs.Spec
	specCopy.Devices = append(specCopy.Devices[:0:0], specCopy.Devices...)
	specCopy.Devices[0].ContainerEdits.DeviceNodes = nil
	emptied.Spec = &specCopy
	for _, tc := range []struct {
		name string
		w    *cdi.Writer
		cs   *cdi.ClaimSpec
		want string
	}{
		{"other kind", other, cs, `only writes "example.com/gpu"`},
		{"device of another claim", w, &moved, "name must start with"},
		{"empty device", w, &emptied, "no container edits"},
		{"nil", w, nil, "nil claim spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.w.Write(tc.cs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write = %v, want error containing %q", err, tc.want)
			}
			if uids, _ := w.List(); len(uids) != 0 {
				t.Errorf("rejected spec listed: %v", uids)
			}
		})
	}
}

// TestCrashMidWrite simulates a process that dies after creating the temporary file and before
// the rename: neither the CDI cache nor List may see a partial spec, an earlier version stays
// intact, and CleanTemp removes the leftover.
func TestCrashMidWrite(t *testing.T) {
	g, _ := generator(t, cditest.Layout{})
	w := writer(t, t.TempDir())
	old := writeClaim(t, g, w, uidMPS, 2)
	oldID := old.DeviceIDs["gpu-2"]

	crash := errors.New("simulated crash")
	cdi.SetWriteFunc(w, func(path string, data []byte, perm os.FileMode) error {
		tmp := filepath.Join(filepath.Dir(path), atomicfile.TempPrefix+filepath.Base(path)+"-4242")
		if err := os.WriteFile(tmp, data[:len(data)/2], perm); err != nil {
			return err
		}
		return crash
	})
	for _, tc := range []struct {
		uid string
		gpu int
	}{{uidTS, 4}, {uidMPS, 3}} { // a new claim, and a rewrite of an existing one
		cs, err := g.Generate(cdi.ClaimDevices{ClaimUID: tc.uid, Devices: []cdi.Device{{Name: "gpu-" + itoa(int64(tc.gpu)), GPUMinor: tc.gpu}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(cs); !errors.Is(err, crash) {
			t.Fatalf("Write = %v, want the simulated crash", err)
		}
	}
	devices, errs, listed := visible(t, w)
	if diff := cmp.Diff([]string{oldID}, devices); diff != "" {
		t.Errorf("CDI devices after crash (-want +got):\n%s", diff)
	}
	if len(errs) != 0 {
		t.Errorf("CDI cache errors after crash: %v", errs)
	}
	if diff := cmp.Diff([]string{uidMPS}, listed); diff != "" {
		t.Errorf("List after crash (-want +got):\n%s", diff)
	}
	if spec, err := w.Read(uidMPS); err != nil || !cmp.Equal(spec, old.Spec) {
		t.Errorf("earlier spec changed by a crashed rewrite: %v", err)
	}

	// Restart: clean leftovers, then the write succeeds.
	removed, err := w.CleanTemp()
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Errorf("CleanTemp removed %v, want the 2 leftovers", removed)
	}
	cdi.SetWriteFunc(w, nil)
	writeClaim(t, g, w, uidTS, 4)
	devices, errs, listed = visible(t, w)
	if len(devices) != 2 || len(errs) != 0 || !cmp.Equal(listed, []string{uidMPS, uidTS}) {
		t.Errorf("after restart: devices %v, errors %v, listed %v", devices, errs, listed)
	}
	entries, _ := os.ReadDir(w.Dir())
	for _, e := range entries {
		if atomicfile.IsTemp(e.Name()) {
			t.Errorf("temporary file %s left", e.Name())
		}
	}
}

// TestWriteFailureKeepsTarget makes the real atomic write fail at the rename (a directory in the
// way) and checks nothing partial is left.
func TestWriteFailureKeepsTarget(t *testing.T) {
	g, _ := generator(t, cditest.Layout{})
	w := writer(t, t.TempDir())
	p, _ := w.SpecPath(uidGPU)
	if err := os.MkdirAll(filepath.Join(p, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	cs, err := g.Generate(cdi.ClaimDevices{ClaimUID: uidGPU, Devices: []cdi.Device{{Name: "gpu-0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(cs); err == nil || !strings.Contains(err.Error(), "claim "+uidGPU) {
		t.Fatalf("Write over a directory = %v, want an error naming the claim", err)
	}
	devices, _, listed := visible(t, w)
	if len(devices) != 0 || len(listed) != 0 {
		t.Errorf("failed write visible: devices %v, listed %v", devices, listed)
	}
	if removed, _ := w.CleanTemp(); len(removed) != 0 {
		t.Errorf("failed write left temporary files %v", removed)
	}
}

func TestConcurrentGenerateWrite(t *testing.T) {
	g, _ := generator(t, cditest.Layout{})
	w := writer(t, t.TempDir())
	uids := []string{uidGPU, uidMIG, uidMPS, uidTS, uidHook}
	var wg sync.WaitGroup
	errs := make(chan error, len(uids)*4)
	for i := range 4 {
		for j, uid := range uids {
			wg.Go(func() {
				cs, err := g.Generate(cdi.ClaimDevices{ClaimUID: uid, Devices: []cdi.Device{
					{Name: "gpu-" + itoa(int64(j)), GPUMinor: j},
					{Name: "mig", GPUMinor: j, MIG: &cdi.MIGInstanceIDs{GI: i, CI: 0}},
				}})
				if err == nil {
					_, err = w.Write(cs)
				}
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	devices, cacheErrs, listed := visible(t, w)
	if len(devices) != 2*len(uids) || len(cacheErrs) != 0 || len(listed) != len(uids) {
		t.Errorf("devices %v, cache errors %v, listed %v", devices, cacheErrs, listed)
	}
}

// syncCounter counts fsyncs.
type syncCounter struct {
	mu sync.Mutex
	n  int
}

func (c *syncCounter) SyncFile(*os.File) error { c.mu.Lock(); c.n++; c.mu.Unlock(); return nil }
func (c *syncCounter) SyncDir(string) error    { c.mu.Lock(); c.n++; c.mu.Unlock(); return nil }

// TestWriterNeverSyncs: a spec must survive a crash of the writing process, not a power loss
// (the spec directory is a tmpfs, and reconciliation rewrites specs after a reboot), so writes,
// removals, pruning and cleaning make no fsync. A sync added here would be paid on every
// prepare and unprepare.
func TestWriterNeverSyncs(t *testing.T) {
	g, _ := generator(t, cditest.Layout{})
	w := writer(t, t.TempDir())
	c := &syncCounter{}
	cdi.SetSyncer(w, c)
	writeClaim(t, g, w, uidGPU, 0)
	writeClaim(t, g, w, uidGPU, 0)
	writeClaim(t, g, w, uidMIG, 1)
	if err := os.WriteFile(filepath.Join(w.Dir(), atomicfile.TempPrefix+"k8s.gpu.nvidia.com-claim_x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CleanTemp(); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove(uidGPU); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Prune(nil); err != nil {
		t.Fatal(err)
	}
	if uids, _ := w.List(); len(uids) != 0 {
		t.Fatalf("specs left: %v", uids)
	}
	if c.n != 0 {
		t.Errorf("the writer made %d fsyncs, want none", c.n)
	}
}
