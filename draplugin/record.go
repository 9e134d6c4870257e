package draplugin

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// sharingState is what the plugin keeps of the sharing engine in the checkpoint, on the first
// device of a claim: the plan (before host changes) or the applied record (after). It is stored
// compactly, because the checkpoint rewrites every claim on each change: what the checkpoint
// devices already say (names, UUIDs, claim identity) is left out, and a claim whose devices are
// all plainly exclusive, with no share ID, admin access, edits or host changes, stores nothing;
// such a record is rebuilt from the devices.
type sharingState struct {
	// Applied is false while the record is only the plan: host changes may have been made but
	// are not recorded, so a rollback after a crash restores the defaults of the planned
	// settings.
	Applied bool `json:"applied,omitempty"`
	// Devices parallel the checkpoint devices of the claim.
	Devices []sharingDevice `json:"devices,omitempty"`
	// Steps are the record's host changes.
	Steps []sharing.Step `json:"steps,omitempty"`
	// Record is the decoded record; it is not stored.
	Record *sharing.Record `json:"-"`
}

type sharingDevice struct {
	Strategy             v1beta1.SharingStrategy `json:"strategy,omitempty"`
	TimeSlice            *int                    `json:"timeSlice,omitempty"`
	MPSDaemonID          string                  `json:"mpsDaemonID,omitempty"`
	PinnedMemoryLimitMiB int64                   `json:"pinnedMiB,omitempty"`
	ShareID              string                  `json:"shareID,omitempty"`
	AdminAccess          bool                    `json:"adminAccess,omitempty"`
	Edits                *cdispec.ContainerEdits `json:"edits,omitempty"`
}

func emptyEdits(e *cdispec.ContainerEdits) bool {
	return len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.Mounts) == 0 && len(e.Hooks) == 0 && len(e.AdditionalGIDs) == 0 && e.IntelRdt == nil
}

// sharingOf decodes the sharing record of a claim. A claim without one gets the record of
// plainly exclusive devices (nil when it has no devices).
func sharingOf(st checkpoint.ClaimState) (*sharingState, error) {
	if len(st.Devices) == 0 {
		return nil, nil
	}
	s := &sharingState{Applied: true} // no record: plainly exclusive devices, nothing to undo
	if raw := st.Devices[0].Sharing; raw != nil {
		s = &sharingState{}
		if err := json.Unmarshal(raw, s); err != nil {
			return nil, fmt.Errorf("decode sharing record of claim %s: %w", st.UID, err)
		}
		if len(s.Devices) != len(st.Devices) {
			return nil, fmt.Errorf("sharing record of claim %s has %d devices, the claim %d", st.UID, len(s.Devices), len(st.Devices))
		}
	}
	rec := &sharing.Record{Version: sharing.RecordVersion, ClaimUID: types.UID(st.UID), Namespace: st.Namespace, Name: st.Name, Steps: s.Steps}
	for i, d := range st.Devices {
		pd := sharing.PreparedDevice{Request: d.Request, Pool: d.Pool, Device: d.Device, UUID: d.GPUUUID, Strategy: v1beta1.StrategyExclusive}
		if d.MIG != nil {
			pd.ParentUUID, pd.UUID = d.MIG.ParentUUID, d.MIG.UUID
			if pd.UUID == "" {
				pd.UUID = "MIG-planned-" + d.Device
			}
		}
		if i < len(s.Devices) {
			sd := s.Devices[i]
			if sd.Strategy != "" {
				pd.Strategy = sd.Strategy
			}
			pd.TimeSlice, pd.MPSDaemonID, pd.PinnedMemoryLimitMiB = sd.TimeSlice, sd.MPSDaemonID, sd.PinnedMemoryLimitMiB
			pd.ShareID, pd.AdminAccess = sd.ShareID, sd.AdminAccess
			if sd.Edits != nil {
				pd.Edits = *sd.Edits
			}
		}
		rec.Devices = append(rec.Devices, pd)
	}
	s.Record = rec
	return s, nil
}

// setSharing stores rec (applied or only planned) on the claim's first device.
func setSharing(st *checkpoint.ClaimState, rec *sharing.Record, applied bool) error {
	if len(st.Devices) == 0 {
		return nil
	}
	s := sharingState{Applied: applied, Steps: rec.Steps}
	trivial := len(rec.Steps) == 0
	for _, d := range st.Devices {
		i := slices.IndexFunc(rec.Devices, func(p sharing.PreparedDevice) bool { return p.Device == d.Device && p.Request == d.Request })
		if i < 0 {
			return fmt.Errorf("the sharing record has no device %s (request %s)", d.Device, d.Request)
		}
		p := rec.Devices[i]
		sd := sharingDevice{TimeSlice: p.TimeSlice, MPSDaemonID: p.MPSDaemonID, PinnedMemoryLimitMiB: p.PinnedMemoryLimitMiB,
			ShareID: p.ShareID, AdminAccess: p.AdminAccess}
		if p.Strategy != v1beta1.StrategyExclusive {
			sd.Strategy = p.Strategy
		}
		if !emptyEdits(&p.Edits) {
			e := p.Edits
			sd.Edits = &e
		}
		if sd != (sharingDevice{}) {
			trivial = false
		}
		s.Devices = append(s.Devices, sd)
	}
	if trivial {
		// Nothing to undo, reset or rebuild beyond what the devices say.
		st.Devices[0].Sharing = nil
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	st.Devices[0].Sharing = b
	return nil
}

// changesHost says whether a record (or plan) changes a host setting.
func changesHost(rec *sharing.Record) bool {
	return rec != nil && slices.ContainsFunc(rec.Steps, func(s sharing.Step) bool { return s.Changed })
}

func anyCreated(st checkpoint.ClaimState) bool {
	for _, d := range st.Devices {
		if d.MIG != nil && d.MIG.Created {
			return true
		}
	}
	return false
}

// editsFor returns the sharing edits of one device of the claim, nil when there are none.
func editsFor(rec *sharing.Record, d checkpoint.PreparedDevice) *cdispec.ContainerEdits {
	if rec == nil {
		return nil
	}
	for i := range rec.Devices {
		sd := &rec.Devices[i]
		if sd.Device != d.Device || sd.Request != d.Request {
			continue
		}
		e := sd.Edits
		if emptyEdits(&e) {
			return nil
		}
		return &e
	}
	return nil
}
