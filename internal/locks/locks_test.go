package locks_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpudra/gpudra/internal/locks"
)

// TestLocksExcludeAcrossInstances: two Locks on one state directory, as two plugin processes
// of a rolling update have, never hold the same key at once; different keys do not wait.
func TestLocksExcludeAcrossInstances(t *testing.T) {
	dir := t.TempDir()
	a, err := locks.NewLocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := locks.NewLocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	unlockA, err := a.Lock([]string{"accel-1", "accel-0"})
	if err != nil {
		t.Fatal(err)
	}
	unlockOther, err := b.Lock([]string{"accel-2"})
	if err != nil {
		t.Fatal(err)
	}
	unlockOther()
	var held atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		unlock, err := b.Lock([]string{"accel-0"})
		if err != nil {
			t.Error(err)
			return
		}
		held.Store(true)
		unlock()
	}()
	time.Sleep(50 * time.Millisecond)
	if held.Load() {
		t.Fatal("the second instance took accel-0 while the first held it")
	}
	unlockA()
	<-done
	if !held.Load() {
		t.Fatal("the second instance never got accel-0")
	}
}

// TestLocksRejectKeysThatAreNoFileNames: a key that would name another file is an error.
func TestLocksRejectKeysThatAreNoFileNames(t *testing.T) {
	l, err := locks.NewLocks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, key := range []string{"", ".", "..", "a/b", `a\b`} {
		if _, err := l.Lock([]string{"ok", key}); err == nil || !strings.Contains(err.Error(), "cannot name a lock file") {
			t.Errorf("key %q: error %v", key, err)
		}
	}
	// The valid key locked before the bad one was released.
	unlock, err := l.Lock([]string{"ok"})
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}
