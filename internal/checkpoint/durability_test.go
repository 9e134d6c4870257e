package checkpoint

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/internal/atomicfile"
)

// syncLog is an atomicfile.Syncer that records the syncs ("file" or "dir") and can hold the
// first directory sync until released.
type syncLog struct {
	mu      sync.Mutex
	calls   []string
	hold    bool
	entered chan struct{}
	release chan struct{}
}

func (l *syncLog) SyncFile(f *os.File) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "file")
	return atomicfile.OSSyncer{}.SyncFile(f)
}

func (l *syncLog) SyncDir(dir string) error {
	l.mu.Lock()
	l.calls = append(l.calls, "dir")
	hold := l.hold
	l.hold = false
	l.mu.Unlock()
	if hold {
		close(l.entered)
		<-l.release
	}
	return atomicfile.OSSyncer{}.SyncDir(dir)
}

func (l *syncLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

// TestDurabilityOfUpdates checks the syncs each update pays for: none to survive a process
// crash, the directory's for PowerLossChecked, file and directory for PowerLoss, and nothing
// again for what is already as durable as asked.
func TestDurabilityOfUpdates(t *testing.T) {
	l := &syncLog{}
	s, _ := open(t, t.TempDir(), WithSyncer(l))
	if diff := cmp.Diff([]string{"file", "dir"}, l.take()); diff != "" {
		t.Errorf("Open of a fresh directory (-want +got):\n%s", diff)
	}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"put, process crash", func() error { return s.Put(claim("a"), atomicfile.ProcessCrash) }, nil},
		{"put, power loss (checked)", func() error { return s.Put(claim("b"), atomicfile.PowerLossChecked) }, []string{"dir"}},
		{"sync, already durable", func() error { return s.Sync(atomicfile.PowerLossChecked) }, nil},
		{"delete unknown, already durable", func() error { return s.Delete("none", atomicfile.PowerLossChecked) }, nil},
		{"delete, process crash", func() error { return s.Delete("a", atomicfile.ProcessCrash) }, nil},
		{"delete unknown after an unsynced write", func() error { return s.Delete("none", atomicfile.PowerLossChecked) }, []string{"dir"}},
		{"sync, intact content asked", func() error { return s.Sync(atomicfile.PowerLoss) }, []string{"file", "dir"}},
		{"put, power loss", func() error { return s.Put(claim("c"), atomicfile.PowerLoss) }, []string{"file", "dir"}},
		{"sync, weaker than what is on disk", func() error { return s.Sync(atomicfile.PowerLossChecked) }, nil},
		{"refresh", s.Refresh, nil},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, l.take()); diff != "" {
			t.Errorf("%s: syncs (-want +got):\n%s", st.name, diff)
		}
	}
	if err := s.Put(claim("d"), atomicfile.Durability(0)); err == nil {
		t.Error("Put with an invalid durability succeeded")
	}
	if _, ok := s.Get("d"); ok {
		t.Error("a refused Put changed the state")
	}
}

// TestDurabilityAfterAnotherProcessWrote: what another process (a rolling update's other pod)
// wrote may not be synced: a durable request syncs it even when this store changes nothing.
func TestDurabilityAfterAnotherProcessWrote(t *testing.T) {
	dir := t.TempDir()
	l := &syncLog{}
	a, _ := open(t, dir, WithSyncer(l))
	b, _ := open(t, dir)
	if err := a.Put(claim("a"), atomicfile.PowerLossChecked); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete("a", atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	l.take()
	if err := a.Sync(atomicfile.PowerLossChecked); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"dir"}, l.take()); diff != "" {
		t.Errorf("syncs after the other store's write (-want +got):\n%s", diff)
	}
	if _, ok := a.Get("a"); ok {
		t.Error("the other store's delete is not seen")
	}
}

// TestGroupCommitSharesTheSync queues durable and non-durable updates behind a durable write
// whose directory sync is in flight: the queued batch is written once and synced once, for all
// of them.
func TestGroupCommitSharesTheSync(t *testing.T) {
	l := &syncLog{entered: make(chan struct{}), release: make(chan struct{})}
	s, _ := open(t, t.TempDir(), WithSyncer(l))
	l.take()
	l.mu.Lock()
	l.hold = true
	l.mu.Unlock()
	first := make(chan error, 1)
	go func() { first <- s.Put(claim("first"), atomicfile.PowerLossChecked) }()
	select {
	case <-l.entered:
	case err := <-first:
		t.Fatalf("a PowerLossChecked update returned (%v) without syncing the directory", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a PowerLossChecked update did not sync the directory")
	}
	const queued = 12
	results := make(chan error, queued)
	for i := range queued {
		d := atomicfile.ProcessCrash
		if i%3 == 0 {
			d = atomicfile.PowerLossChecked
		}
		go func() { results <- s.Put(claim(fmt.Sprintf("q%d", i)), d) }()
	}
	for { // wait until all are queued behind the sync in flight
		s.qmu.Lock()
		n := len(s.queue)
		s.qmu.Unlock()
		if n == queued {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(l.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range queued {
		if err := <-results; err != nil {
			t.Error(err)
		}
	}
	if diff := cmp.Diff([]string{"dir", "dir"}, l.take()); diff != "" {
		t.Errorf("syncs (-want +got): want one for the first update and one for the whole batch:\n%s", diff)
	}
	if got := len(claims(s)); got != queued+1 {
		t.Errorf("%d claims, want %d", got, queued+1)
	}
}
