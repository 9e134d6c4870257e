package sharing

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// Registry knows the prepared claims of a node and refuses a claim whose sharing setup is
// incompatible with theirs. It also holds the partial records of failed Prepares (see
// Manager.Prepare) until they are undone; their devices count in conflict checks like those of
// prepared claims. It is in memory; Restore rebuilds it from checkpointed records. It is safe
// for concurrent use.
type Registry struct {
	mu      sync.Mutex
	records map[types.UID]*Record
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{records: map[types.UID]*Record{}} }

// Restore replaces the registry's content with copies of records (the prepared claims of a
// checkpoint).
func (r *Registry) Restore(records []Record) error {
	m := make(map[types.UID]*Record, len(records))
	for i := range records {
		rec := records[i]
		if rec.Version != RecordVersion {
			return fmt.Errorf("record of claim %s/%s (%s): version %d, this program reads version %d", rec.Namespace, rec.Name, rec.ClaimUID, rec.Version, RecordVersion)
		}
		if _, dup := m[rec.ClaimUID]; dup {
			return fmt.Errorf("two records for claim %s/%s (%s)", rec.Namespace, rec.Name, rec.ClaimUID)
		}
		m[rec.ClaimUID] = rec.DeepCopy()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = m
	return nil
}

// Sync makes the registry agree with records for every claim that touches one of the physical
// GPUs in gpus: such claims not in records are forgotten, copies of those in records are
// registered; claims on other GPUs are left alone. It is Restore for part of a node, for a caller
// that knows the state of those GPUs is settled (it holds their locks) while other GPUs may be
// busy.
func (r *Registry) Sync(records []Record, gpus []string) error {
	touches := func(rec *Record) bool {
		return slices.ContainsFunc(physicalGPUs(rec), func(u string) bool { return slices.Contains(gpus, u) })
	}
	fresh := map[types.UID]*Record{}
	for i := range records {
		rec := records[i]
		if rec.Version != RecordVersion {
			return fmt.Errorf("record of claim %s/%s (%s): version %d, this program reads version %d", rec.Namespace, rec.Name, rec.ClaimUID, rec.Version, RecordVersion)
		}
		if touches(&rec) {
			fresh[rec.ClaimUID] = rec.DeepCopy()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, rec := range r.records {
		if _, ok := fresh[uid]; !ok && touches(rec) {
			delete(r.records, uid)
		}
	}
	maps.Copy(r.records, fresh)
	return nil
}

// Get returns the record of a prepared claim.
func (r *Registry) Get(uid types.UID) (Record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.records[uid]
	if !ok {
		return Record{}, false
	}
	return *rec.DeepCopy(), true
}

// List returns the records of all prepared claims, ordered by claim UID.
func (r *Registry) List() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Record, 0, len(r.records))
	for _, rec := range r.records {
		out = append(out, *rec.DeepCopy())
	}
	slices.SortFunc(out, func(a, b Record) int { return compareStrings(string(a.ClaimUID), string(b.ClaimUID)) })
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *Registry) add(rec *Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records[rec.ClaimUID] = rec
}

func (r *Registry) remove(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.records, uid)
}

// holder returns another claim's record that holds resource, and its step: a prepared claim's
// if there is one, else a partial record's. It returns the record's identity and Partial flag
// with that one step, not a copy of the whole record (whose devices and edits are most of it):
// a share joining a GPU's settings needs no more. The step's pointers are the registry's; that
// is safe because records are never changed in place once registered, and every record that
// leaves the Manager (Get, List, Prepare's result) is a deep copy.
func (r *Registry) holder(resource string, except types.UID) (*Record, *Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found *Record
	var step int
	for _, uid := range sortedUIDs(r.records) {
		rec := r.records[uid]
		if uid == except || (found != nil && rec.Partial) {
			continue
		}
		if i := slices.IndexFunc(rec.Steps, func(s Step) bool { return s.Resource == resource }); i >= 0 {
			found, step = rec, i
			if !rec.Partial {
				break
			}
		}
	}
	if found == nil {
		return nil, nil
	}
	c := &Record{Version: found.Version, ClaimUID: found.ClaimUID, Namespace: found.Namespace, Name: found.Name,
		Partial: found.Partial, Steps: []Step{found.Steps[step]}}
	return c, &c.Steps[0]
}

// held reports whether another claim's record (a prepared or a partial one) holds resource;
// holder without the copy.
func (r *Registry) held(resource string, except types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, rec := range r.records {
		if uid != except && slices.ContainsFunc(rec.Steps, func(s Step) bool { return s.Resource == resource }) {
			return true
		}
	}
	return false
}

// usedDaemons returns the IDs of the MPS daemons that any registered record, partial ones
// included, names in a step or a device, sorted.
func (r *Registry) usedDaemons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, rec := range r.records {
		for _, s := range rec.Steps {
			if s.Daemon != nil {
				ids = append(ids, s.Daemon.ID)
			}
		}
		for _, d := range rec.Devices {
			if d.MPSDaemonID != "" {
				ids = append(ids, d.MPSDaemonID)
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// daemon returns the spec of the MPS daemon id as a prepared claim (not a partial record)
// holds it, and the physical GPUs of its devices.
func (r *Registry) daemon(id string) (MPSDaemonSpec, []string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, uid := range sortedUIDs(r.records) {
		rec := r.records[uid]
		if rec.Partial {
			continue
		}
		for _, s := range rec.Steps {
			if s.Action == ActionStartMPSDaemon && s.Daemon != nil && s.Daemon.ID == id {
				spec := *s.Daemon
				spec.DeviceUUIDs = slices.Clone(spec.DeviceUUIDs)
				spec.PinnedMemoryLimits = maps.Clone(spec.PinnedMemoryLimits)
				served := slices.DeleteFunc(slices.Clone(rec.Devices), func(d PreparedDevice) bool { return d.MPSDaemonID != id })
				return spec, physicalGPUs(&Record{Devices: served, Steps: []Step{{Daemon: &spec}}}), true
			}
		}
	}
	return MPSDaemonSpec{}, nil, false
}

func sortedUIDs(m map[types.UID]*Record) []types.UID {
	uids := make([]types.UID, 0, len(m))
	for uid := range m {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	return uids
}

// Check returns an error naming both claims when rec's devices cannot be set up next to
// those of an already prepared claim:
//   - a device (or a MIG device of a GPU and the whole GPU) used by two claims, unless both
//     allocations carry a share ID;
//   - on a shared device: different strategies or different time slice intervals.
//
// Records of the same claim never conflict (one claim used by several pods is prepared once),
// and admin access devices never conflict.
func (r *Registry) Check(rec *Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, uid := range sortedUIDs(r.records) {
		other := r.records[uid]
		if uid == rec.ClaimUID {
			continue
		}
		for _, n := range rec.Devices {
			for _, o := range other.Devices {
				if err := conflict(rec, &n, other, &o); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func describe(p *PreparedDevice) string {
	switch {
	case p.Strategy == v1beta1.StrategyTimeSlicing && p.TimeSlice != nil:
		return fmt.Sprintf("TimeSlicing (time slice %d)", *p.TimeSlice)
	case p.Strategy == v1beta1.StrategyMPS:
		return "MPS"
	}
	return string(p.Strategy)
}

func conflict(rec *Record, n *PreparedDevice, other *Record, o *PreparedDevice) error {
	if n.AdminAccess || o.AdminAccess {
		return nil
	}
	claims := func(what string) error {
		return fmt.Errorf("claim %s/%s (%s): device %q (%s) of request %q with %s conflicts with claim %s/%s (%s), prepared with device %q (%s) of request %q with %s: %s",
			rec.Namespace, rec.Name, rec.ClaimUID, n.Device, n.UUID, n.Request, describe(n),
			other.Namespace, other.Name, other.ClaimUID, o.Device, o.UUID, o.Request, describe(o), what)
	}
	switch {
	case n.UUID == o.UUID:
	case n.ParentUUID != "" && n.ParentUUID == o.UUID, o.ParentUUID != "" && o.ParentUUID == n.UUID:
		return claims("a GPU used whole cannot also serve one of its MIG devices")
	default:
		return nil
	}
	if n.ShareID == "" || o.ShareID == "" {
		return claims("the device is allocated to both claims, but not as a shared device (no share ID)")
	}
	if n.Strategy != o.Strategy {
		return claims("claims sharing a device must use the same sharing strategy")
	}
	if !equalPtr(n.TimeSlice, o.TimeSlice) {
		return claims("a GPU has one time slice; claims sharing it must ask for the same interval")
	}
	return nil
}
