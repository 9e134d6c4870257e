package lifecycle

import "sync"

// InFlight lets a plugin's Stop wait for the operations under way (prepares, unprepares, a
// round of supervision), so that the driver can release what they use afterwards. Each
// operation holds it from Begin until it calls the returned end; Wait returns once none is
// under way. An operation must not Begin again while it holds it: a waiting Wait blocks new
// ones. The zero value is ready to use.
type InFlight struct{ mu sync.RWMutex }

// Begin marks an operation under way until end is called.
func (f *InFlight) Begin() (end func()) {
	f.mu.RLock()
	return f.mu.RUnlock
}

// Wait returns once no operation that began before it is under way.
func (f *InFlight) Wait() {
	f.mu.Lock()
	//lint:ignore SA2001 the lock is taken only to wait until the operations under way end
	f.mu.Unlock()
}
