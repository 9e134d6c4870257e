package sharing

import (
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// ResetPlan turns a plan (from Plan) whose host changes may have been made but not recorded —
// a crash between making them and checkpointing Prepare's record — into a record whose Undo
// puts the planned host settings back: to the values the plan read before (its Steps), or, for
// a plan without steps (a record of an older version, or one rebuilt by RecoverRecord), to the
// defaults: time slice Default, compute mode DEFAULT, MPS daemons stopped. Settings that another
// prepared claim holds are left alone by Undo, as for any record. It returns nil when the plan
// makes no host change.
func (m *Manager) ResetPlan(plan *Record) *Record {
	if plan == nil {
		return nil
	}
	rec := plan.DeepCopy()
	if slices.ContainsFunc(rec.Steps, func(s Step) bool { return s.Changed }) {
		return rec
	}
	if len(rec.Steps) > 0 {
		return nil // the plan changes nothing
	}
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
			mode, def := mpsComputeMode(rec, u), ComputeModeDefault
			rec.Steps = append(rec.Steps, Step{Action: ActionSetComputeMode, Resource: resourceComputeMode(u), UUID: u,
				ComputeMode: &mode, PreviousComputeMode: &def, Changed: true})
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
			out = append(out, m.daemonSpec(d.MPSDaemonID, nil))
			i = len(out) - 1
		}
		if !slices.Contains(out[i].DeviceUUIDs, d.UUID) {
			out[i].DeviceUUIDs = append(out[i].DeviceUUIDs, d.UUID)
		}
	}
	return out
}

// RecoverRecord rebuilds the record of a claim whose checkpoint was lost, from what is on the
// node: devices carries each device's identity and the container edits found in its CDI spec.
// A device whose edits mount an MPS pipe directory of this manager is served by that daemon;
// the record's steps reset what such a daemon needs (its devices' compute mode back to
// DEFAULT, the daemon stopped), as ResetPlan does. Time slices leave no trace in a spec and are
// not recovered. The record can be passed to Restore and, on unprepare, to Undo.
func (m *Manager) RecoverRecord(claimUID types.UID, devices []PreparedDevice) *Record {
	rec := &Record{Version: RecordVersion, ClaimUID: claimUID, Devices: slices.Clone(devices)}
	for i := range rec.Devices {
		d := &rec.Devices[i]
		if d.Strategy == "" {
			d.Strategy = v1beta1.StrategyExclusive
		}
		if id, ok := m.daemonOf(d.Edits); ok {
			d.Strategy, d.MPSDaemonID = v1beta1.StrategyMPS, id
		}
	}
	if reset := m.ResetPlan(rec); reset != nil {
		rec.Steps = reset.Steps
	}
	return rec
}

// daemonOf returns the daemon whose pipe directory the edits mount, if it is one of this
// manager's.
func (m *Manager) daemonOf(edits cdispec.ContainerEdits) (string, bool) {
	for _, mnt := range edits.Mounts {
		if mnt == nil || mnt.ContainerPath != MPSPipeContainerPath {
			continue
		}
		rel, err := filepath.Rel(m.mpsRoot, mnt.HostPath)
		if err != nil {
			continue
		}
		id, pipe := filepath.Split(rel)
		id = strings.TrimSuffix(id, string(filepath.Separator))
		if pipe == "pipe" && id != "" && !strings.Contains(id, string(filepath.Separator)) && !strings.HasPrefix(id, "..") {
			return id, true
		}
	}
	return "", false
}
