package sharing

import (
	"slices"
)

// ResetPlan turns a plan (from Plan) whose host changes may have been made but not recorded —
// a crash between making them and checkpointing Prepare's record — into a record whose Undo puts
// the planned host settings back to their defaults: time slice Default, compute mode DEFAULT,
// MPS daemons stopped. Settings that another prepared claim holds are left alone by Undo, as
// for any record. It returns nil when the plan makes no host change.
func (m *Manager) ResetPlan(plan *Record) *Record {
	if plan == nil {
		return nil
	}
	rec := plan.DeepCopy()
	rec.Steps = nil
	seen := map[string]bool{}
	for _, d := range rec.Devices {
		if d.TimeSlice == nil || seen[resourceTimeSlice(d.UUID)] {
			continue
		}
		seen[resourceTimeSlice(d.UUID)] = true
		v := *d.TimeSlice
		rec.Steps = append(rec.Steps, Step{Action: ActionSetTimeSlice, Resource: resourceTimeSlice(d.UUID), UUID: d.UUID, TimeSlice: &v, Changed: true})
	}
	for _, spec := range m.plannedDaemons(rec) {
		for _, u := range spec.DeviceUUIDs {
			if seen[resourceComputeMode(u)] {
				continue
			}
			seen[resourceComputeMode(u)] = true
			excl, def := ComputeModeExclusiveProcess, ComputeModeDefault
			rec.Steps = append(rec.Steps, Step{Action: ActionSetComputeMode, Resource: resourceComputeMode(u), UUID: u,
				ComputeMode: &excl, PreviousComputeMode: &def, Changed: true})
		}
		rec.Steps = append(rec.Steps, Step{Action: ActionStartMPSDaemon, Resource: resourceDaemon(spec.ID), Daemon: &spec, Changed: true})
	}
	if len(rec.Steps) == 0 {
		return nil
	}
	return rec
}

// plannedDaemons rebuilds the MPS daemons a plan would start, in order of first use, with the
// directories this manager gives them.
func (m *Manager) plannedDaemons(rec *Record) []MPSDaemonSpec {
	var out []MPSDaemonSpec
	for _, d := range rec.Devices {
		if d.MPSDaemonID == "" {
			continue
		}
		i := slices.IndexFunc(out, func(s MPSDaemonSpec) bool { return s.ID == d.MPSDaemonID })
		if i < 0 {
			out = append(out, m.daemonSpec(d.MPSDaemonID, nil, 0))
			i = len(out) - 1
		}
		if !slices.Contains(out[i].DeviceUUIDs, d.UUID) {
			out[i].DeviceUUIDs = append(out[i].DeviceUUIDs, d.UUID)
		}
	}
	return out
}
