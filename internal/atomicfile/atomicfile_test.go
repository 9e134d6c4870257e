package atomicfile_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/internal/atomicfile"
)

// recorder is a Syncer that records what it is asked to sync ("file <base>" or "dir <base>")
// and optionally fails directory syncs.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	failDir error
}

func (r *recorder) SyncFile(f *os.File) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "file "+filepath.Base(f.Name()))
	return nil
}

func (r *recorder) SyncDir(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "dir "+filepath.Base(dir))
	return r.failDir
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func TestWriteReplacesAndSetsMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	files := atomicfile.New()
	for _, tc := range []struct {
		data string
		perm os.FileMode
	}{{"first", 0o600}, {"second, longer content", 0o644}} {
		if err := files.Write(p, []byte(tc.data), tc.perm, atomicfile.PowerLoss); err != nil {
			t.Fatalf("Write: %v", err)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.data, string(got)); diff != "" {
			t.Errorf("content (-want +got):\n%s", diff)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != tc.perm {
			t.Errorf("mode = %v, want %v", st.Mode().Perm(), tc.perm)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the target", len(entries))
	}
}

// TestDurabilityDecidesTheSyncs checks what each durability fsyncs. The expectations follow
// from what must be on stable storage for each guarantee: nothing for a process crash (the
// page cache survives it); the directory entry for the rename or removal to survive a power
// loss; the file's data as well for its content to survive intact.
func TestDurabilityDecidesTheSyncs(t *testing.T) {
	for _, tc := range []struct {
		d                 atomicfile.Durability
		write, remove, sy []string
	}{
		{atomicfile.ProcessCrash, nil, nil, nil},
		{atomicfile.PowerLossChecked, []string{"dir d"}, []string{"dir d"}, []string{"dir d"}},
		{atomicfile.PowerLoss, []string{"file tmp", "dir d"}, []string{"dir d"}, []string{"file f", "dir d"}},
	} {
		t.Run(tc.d.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			r := &recorder{}
			files := atomicfile.New(atomicfile.WithSyncer(r))
			p := filepath.Join(dir, "f")
			if err := files.Write(p, []byte("x"), 0o600, tc.d); err != nil {
				t.Fatal(err)
			}
			got := r.take()
			for i, c := range got { // the temporary file's name is random
				if len(c) > len("file ") && c[:5] == "file " && atomicfile.IsTemp(c[5:]) {
					got[i] = "file tmp"
				}
			}
			if diff := cmp.Diff(tc.write, got); diff != "" {
				t.Errorf("Write syncs (-want +got):\n%s", diff)
			}
			if err := files.Sync(p, tc.d); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.sy, r.take()); diff != "" {
				t.Errorf("Sync syncs (-want +got):\n%s", diff)
			}
			if err := files.Remove(p, tc.d); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.remove, r.take()); diff != "" {
				t.Errorf("Remove syncs (-want +got):\n%s", diff)
			}
			if err := files.Remove(p, tc.d); err != nil {
				t.Errorf("Remove of a missing file: %v", err)
			}
			if got := r.take(); len(got) != 0 {
				t.Errorf("Remove of a missing file synced %v", got)
			}
		})
	}
}

func TestInvalidDurability(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	files := atomicfile.New()
	for _, d := range []atomicfile.Durability{0, atomicfile.PowerLoss + 1} {
		if err := files.Write(p, []byte("x"), 0o600, d); err == nil {
			t.Errorf("Write with durability %v succeeded", d)
		}
		if err := files.Remove(p, d); err == nil {
			t.Errorf("Remove with durability %v succeeded", d)
		}
		if err := files.Sync(p, d); err == nil {
			t.Errorf("Sync with durability %v succeeded", d)
		}
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Write created the file: %v", err)
	}
}

func TestDirSyncFailureIsNotDurable(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	io := errors.New("input/output error")
	files := atomicfile.New(atomicfile.WithSyncer(&recorder{failDir: io}))
	err := files.Write(p, []byte("new"), 0o600, atomicfile.PowerLossChecked)
	var nd *atomicfile.NotDurableError
	if !errors.As(err, &nd) || !errors.Is(err, io) || nd.Path != p {
		t.Fatalf("Write = %v, want a *NotDurableError for %s wrapping the fsync error", err, p)
	}
	if got, _ := os.ReadFile(p); string(got) != "new" {
		t.Errorf("content %q: a not-durable write must still be in place", got)
	}
	if err := files.Write(p, []byte("newer"), 0o600, atomicfile.ProcessCrash); err != nil {
		t.Errorf("ProcessCrash write synced the directory: %v", err)
	}
}

func TestWriteFailureLeavesTargetAndNoTemp(t *testing.T) {
	dir := t.TempDir()
	files := atomicfile.New()
	p := filepath.Join(dir, "target")
	if err := files.Write(p, []byte("old"), 0o600, atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	// A directory in the way of the rename makes the write fail after the temp file exists.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := files.Write(blocked, []byte("new"), 0o600, atomicfile.PowerLoss); err == nil {
		t.Fatal("Write over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if atomicfile.IsTemp(e.Name()) {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	got, _ := os.ReadFile(p)
	if string(got) != "old" {
		t.Errorf("unrelated target changed to %q", got)
	}
}

// TestCleanRemovesOnlyTheFilesTemps: Clean removes the leftover temporaries of the file it is
// given, and neither the file itself nor another file's temporaries, whose writer may be
// writing under a lock the caller does not hold.
func TestCleanRemovesOnlyTheFilesTemps(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep.json")
	leftover := filepath.Join(dir, atomicfile.TempPrefix+"keep.json-123")
	others := []string{filepath.Join(dir, atomicfile.TempPrefix+"other.json-456"), filepath.Join(dir, atomicfile.TempPrefix+"keep.json.bak-789")}
	for _, p := range append([]string{keep, leftover}, others...) {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := atomicfile.Clean(dir, "keep.json")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Base(leftover)}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	for _, p := range append([]string{keep}, others...) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("Clean removed %s: %v", filepath.Base(p), err)
		}
	}
}

// counter counts syncs, for the example.
type counter struct{ files, dirs int }

func (c *counter) SyncFile(*os.File) error { c.files++; return nil }
func (c *counter) SyncDir(string) error    { c.dirs++; return nil }

func ExampleFiles_Write() {
	dir, _ := os.MkdirTemp("", "atomicfile")
	defer os.RemoveAll(dir)
	c := &counter{}
	files := atomicfile.New(atomicfile.WithSyncer(c))
	p := filepath.Join(dir, "claim.json")
	// A crash of the process must not tear the file; a power loss may lose it.
	if err := files.Write(p, []byte(`{"ok":true}`), 0o600, atomicfile.ProcessCrash); err != nil {
		panic(err)
	}
	// The removal must survive a power loss too.
	if err := files.Remove(p, atomicfile.PowerLossChecked); err != nil {
		panic(err)
	}
	fmt.Printf("file fsyncs %d, directory fsyncs %d\n", c.files, c.dirs)
	// Output: file fsyncs 0, directory fsyncs 1
}
