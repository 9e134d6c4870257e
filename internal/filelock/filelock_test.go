package filelock_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpudra/gpudra/internal/filelock"
)

// TestExcludesOtherOpenFiles: two opens of one lock file exclude each other, as two processes
// would; Close releases.
func TestExcludesOtherOpenFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	a, err := filelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := filelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Lock(true); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		if err := b.Lock(true); err != nil {
			t.Error(err)
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("second open took the lock while the first held it")
	case <-time.After(100 * time.Millisecond):
	}
	if err := a.Close(); err != nil { // releases
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("lock not released by Close")
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
}
