package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/internal/atomicfile"
)

func TestWriteReplacesAndSetsMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, tc := range []struct {
		data string
		perm os.FileMode
	}{{"first", 0o600}, {"second, longer content", 0o644}} {
		if err := atomicfile.Write(p, []byte(tc.data), tc.perm); err != nil {
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

func TestWriteFailureLeavesTargetAndNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "target")
	if err := atomicfile.Write(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory in the way of the rename makes the write fail after the temp file exists.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(blocked, []byte("new"), 0o600); err == nil {
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

func TestCleanRemovesOnlyTemps(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep.json")
	leftover := filepath.Join(dir, atomicfile.TempPrefix+"keep.json-123")
	for _, p := range []string{keep, leftover} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := atomicfile.Clean(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Base(leftover)}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("Clean removed a real file: %v", err)
	}
	if err := atomicfile.Remove(keep); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Remove(keep); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func ExampleWrite() {
	dir, _ := os.MkdirTemp("", "atomicfile")
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "claim.json")
	if err := atomicfile.Write(p, []byte(`{"ok":true}`), 0o600); err != nil {
		panic(err)
	}
	b, _ := os.ReadFile(p)
	os.Stdout.Write(append(b, '\n'))
	// Output: {"ok":true}
}
