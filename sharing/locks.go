package sharing

import (
	"slices"
	"sync"
)

// gpuLocks serializes the host actions of each physical GPU. Claims that could conflict or
// share a host setting always share a physical GPU (a device, or a MIG device and its GPU), so
// holding the locks of a claim's GPUs makes its conflict check, host changes and registration
// one step for every claim that could interfere, while claims on other GPUs go on.
type gpuLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// lock takes the locks of the given physical GPUs in sorted order (so that two callers never
// wait for each other in a cycle) and returns the function that releases them.
func (l *gpuLocks) lock(uuids []string) (unlock func()) {
	uuids = slices.Clone(uuids)
	slices.Sort(uuids)
	uuids = slices.Compact(uuids)
	ms := make([]*sync.Mutex, 0, len(uuids))
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	for _, u := range uuids {
		m := l.locks[u]
		if m == nil {
			m = &sync.Mutex{}
			l.locks[u] = m
		}
		ms = append(ms, m)
	}
	l.mu.Unlock()
	for _, m := range ms {
		m.Lock()
	}
	return func() {
		for i := len(ms) - 1; i >= 0; i-- {
			ms[i].Unlock()
		}
	}
}

// physicalGPUs returns the physical GPUs whose settings a record's devices and steps touch:
// a MIG device counts as its parent GPU.
func physicalGPUs(rec *Record) []string {
	parent := map[string]string{}
	var out []string
	for _, d := range rec.Devices {
		p := d.UUID
		if d.ParentUUID != "" {
			p = d.ParentUUID
		}
		parent[d.UUID] = p
		out = append(out, p)
	}
	add := func(uuid string) {
		if p, ok := parent[uuid]; ok {
			uuid = p
		}
		if uuid != "" {
			out = append(out, uuid)
		}
	}
	for _, s := range rec.Steps {
		add(s.UUID)
		if s.Daemon != nil {
			for _, u := range s.Daemon.DeviceUUIDs {
				add(u)
			}
		}
	}
	return out
}
