package gpudra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// Step names used in errors and in the errors metric.
const (
	stepValidate     = "validate claim"
	stepCheckpoint   = "checkpoint"
	stepResolve      = "resolve device"
	stepPlanSharing  = "resolve sharing config"
	stepMIGCreate    = "create MIG instance"
	stepSharing      = "apply sharing"
	stepCDIGenerate  = "generate CDI spec"
	stepCDIWrite     = "write CDI spec"
	stepRollback     = "roll back"
	stepCDIRemove    = "remove CDI spec"
	stepSharingUndo  = "undo sharing"
	stepMIGDestroy   = "destroy MIG instance"
	stepRecoverState = "recover earlier attempt"
)

// stepError is an error of one step of prepare or unprepare, for one device when Device is set.
type stepError struct {
	Step   string
	Device string
	Err    error
}

func (e *stepError) Error() string {
	if e.Device != "" {
		return "device " + e.Device + ": " + e.Step + ": " + e.Err.Error()
	}
	return e.Step + ": " + e.Err.Error()
}

func (e *stepError) Unwrap() error { return e.Err }

func fail(step, device string, err error) error {
	return &stepError{Step: step, Device: device, Err: err}
}

// crashError marks an error returned by the AfterStep hook: the operation stops without cleanup.
type crashError struct{ err error }

func (e *crashError) Error() string { return e.err.Error() }
func (e *crashError) Unwrap() error { return e.err }

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

// prepDevice is one of our allocation results being prepared.
type prepDevice struct {
	result resourceapi.DeviceRequestAllocationResult
	gpu    *gpu.GPU
	// static is set for an existing (static) MIG device.
	static *gpu.MIGDevice
	// profile and placement are set for a dynamic MIG device.
	profile   *mig.GIProfile
	placement mig.Placement
}

func claimRef(namespace, name string, uid types.UID) string {
	return fmt.Sprintf("%s/%s (%s)", namespace, name, uid)
}

// prepareClaim prepares one claim and turns any error into the claim's result.
func (p *Plugin) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "claimUID", claim.UID)
	ctx = klog.NewContext(ctx, logger)
	start := p.now()
	devices, err := p.prepare(ctx, claim)
	p.metrics.observe(opPrepare, p.now().Sub(start), err)
	if err != nil {
		err = fmt.Errorf("prepare claim %s: %w", claimRef(claim.Namespace, claim.Name, claim.UID), err)
		logger.Error(err, "Prepare failed")
		return kubeletplugin.PrepareResult{Err: err}
	}
	logger.V(2).Info("Prepared claim", "devices", len(devices), "duration", p.now().Sub(start))
	return kubeletplugin.PrepareResult{Devices: devices}
}

func (p *Plugin) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	uid := string(claim.UID)
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return nil, fail(stepValidate, "", err)
	}
	if claim.Status.Allocation == nil {
		return nil, fail(stepValidate, "", errors.New("claim is not allocated"))
	}
	var ours []prepDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != p.driverName {
			continue
		}
		d, err := p.resolve(r)
		if err != nil {
			return nil, fail(stepResolve, r.Device, err)
		}
		ours = append(ours, d)
	}
	if len(ours) == 0 {
		return nil, nil
	}
	gpus := make([]string, 0, len(ours))
	for _, d := range ours {
		gpus = append(gpus, d.gpu.UUID)
	}
	unlock := p.lockGPUs(gpus)
	defer unlock()

	if st, ok := p.store.Get(uid); ok {
		switch st.Phase {
		case checkpoint.PrepareCompleted:
			klog.FromContext(ctx).V(3).Info("Claim already prepared, returning the recorded devices")
			return p.resultFromState(claim, st), nil
		case checkpoint.PrepareStarted:
			if err := p.rollback(ctx, st, true); err != nil {
				return nil, fail(stepRecoverState, "", err)
			}
		case checkpoint.UnprepareStarted:
			if err := p.finishUnprepare(ctx, st); err != nil {
				return nil, fail(stepRecoverState, "", err)
			}
		}
	}
	return p.prepareLocked(ctx, claim, ours)
}

// resolve maps an allocation result to the GPU and, for MIG, the instance it names.
func (p *Plugin) resolve(r resourceapi.DeviceRequestAllocationResult) (prepDevice, error) {
	d := prepDevice{result: r}
	g, err := p.gpuForDevice(r.Device)
	if err != nil {
		return d, err
	}
	d.gpu = g
	if r.Device == GPUDeviceName(g.Minor) {
		return d, nil
	}
	if m, ok := p.static[r.Device]; ok {
		d.static = m
		return d, nil
	}
	if !p.dynamicMIG {
		return d, fmt.Errorf("MIG device %q does not exist on GPU %s and dynamic MIG is off", r.Device, g.UUID)
	}
	mn, err := ParseMIGDeviceName(r.Device)
	if err != nil {
		return d, err
	}
	model, err := p.migLookup(g.ProductName)
	if err != nil {
		return d, fmt.Errorf("GPU %s: %w", g.UUID, err)
	}
	prof, ok := model.ProfileByID(mn.GIProfileID)
	if !ok || mn.CISuffix != "" {
		return d, fmt.Errorf("device %q names no GPU-instance profile of %s", r.Device, model.Name)
	}
	pl := mig.Placement{Start: mn.PlacementStart, Size: prof.MemorySlices()}
	if !prof.AllowsPlacement(pl) || MIGDeviceName(g.Minor, prof.Name, prof.ID, pl.Start, "") != r.Device {
		return d, fmt.Errorf("device %q is not a valid %s placement on %s", r.Device, prof.Name, model.Name)
	}
	d.profile, d.placement = prof, pl
	return d, nil
}

// resultFromState rebuilds the prepare result of a completed claim from the checkpoint.
func (p *Plugin) resultFromState(claim *resourceapi.ResourceClaim, st checkpoint.ClaimState) []kubeletplugin.Device {
	shareIDs := map[string]*types.UID{}
	if claim.Status.Allocation != nil {
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver == p.driverName && r.ShareID != nil {
				id := *r.ShareID
				shareIDs[r.Request+"\x00"+r.Device] = &id
			}
		}
	}
	out := make([]kubeletplugin.Device, 0, len(st.Devices))
	for _, d := range st.Devices {
		out = append(out, kubeletplugin.Device{
			Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device,
			CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs), ShareID: shareIDs[d.Request+"\x00"+d.Device],
		})
	}
	return out
}

// ownerOf returns the claim (other than except) that records an instance at the placement.
func (p *Plugin) ownerOf(gpuUUID string, start int, except string) (string, bool) {
	for _, c := range p.store.List() {
		if c.UID == except {
			continue
		}
		for _, d := range c.Devices {
			if d.MIG != nil && d.MIG.ParentUUID == gpuUUID && d.MIG.Placement.Start == start {
				return claimRef(c.Namespace, c.Name, types.UID(c.UID)), true
			}
		}
	}
	return "", false
}

// prepareLocked runs the prepare steps with the claim's GPU locks held.
func (p *Plugin) prepareLocked(ctx context.Context, claim *resourceapi.ResourceClaim, ours []prepDevice) (_ []kubeletplugin.Device, err error) {
	logger := klog.FromContext(ctx)
	uid := string(claim.UID)
	st := checkpoint.ClaimState{UID: uid, Namespace: claim.Namespace, Name: claim.Name, Phase: checkpoint.PrepareStarted}
	migUUIDs := map[string]string{} // DRA device → MIG UUID
	migIDs := map[string]cdi.MIGDevice{}
	// 1. What will be done: devices, MIG instances to create (or reuse), the sharing plan.
	for _, d := range ours {
		pd := checkpoint.PreparedDevice{Request: d.result.Request, Pool: d.result.Pool, Device: d.result.Device, GPUUUID: d.gpu.UUID}
		switch {
		case d.static != nil:
			m := d.static
			pd.MIG = &checkpoint.MIGInstance{ParentUUID: d.gpu.UUID, Profile: m.Profile, GIProfileID: m.GIProfileID,
				CIProfileID: m.CIProfileID, Placement: checkpoint.Placement{Start: m.Placement.Start, Size: m.Placement.Size},
				GIID: m.GIID, CIID: m.CIID, UUID: m.UUID}
			migUUIDs[d.result.Device] = m.UUID
			migIDs[d.result.Device] = cdi.MIGDevice{GI: m.GIID, CI: m.CIID}
		case d.profile != nil:
			if owner, taken := p.ownerOf(d.gpu.UUID, d.placement.Start, uid); taken {
				return nil, fail(stepMIGCreate, d.result.Device, fmt.Errorf("the instance at placement %d on GPU %s is prepared for claim %s", d.placement.Start, d.gpu.UUID, owner))
			}
			pd.MIG = &checkpoint.MIGInstance{ParentUUID: d.gpu.UUID, Profile: d.profile.Name, GIProfileID: d.profile.ID,
				Placement: checkpoint.Placement{Start: d.placement.Start, Size: d.placement.Size}, Created: true}
			if p.mig == nil {
				return nil, fail(stepMIGCreate, d.result.Device, errors.New("no MIG controller configured"))
			}
			existing, err := p.mig.Instances(ctx, d.gpu.UUID)
			if err != nil {
				return nil, fail(stepMIGCreate, d.result.Device, err)
			}
			for _, in := range existing {
				if in.Placement.Start == d.placement.Start && in.GIProfileID == d.profile.ID && in.UUID != "" {
					// An instance nobody prepared already sits there: use it, never destroy it.
					pd.MIG.Created = false
					pd.MIG.GIID, pd.MIG.CIID, pd.MIG.UUID = in.GIID, in.CIID, in.UUID
					migUUIDs[d.result.Device] = in.UUID
					migIDs[d.result.Device] = cdi.MIGDevice{GI: in.GIID, CI: in.CIID}
					logger.V(2).Info("Reusing existing MIG instance", "device", d.result.Device, "migUUID", in.UUID)
				}
			}
		}
		st.Devices = append(st.Devices, pd)
	}
	lookup := p.sharingLookup(ours, migUUIDs)
	plan, err := p.sharing.Plan(ctx, claim, lookup)
	if err != nil {
		return nil, fail(stepPlanSharing, "", err)
	}
	if err := setSharing(&st, plan, false); err != nil {
		return nil, fail(stepCheckpoint, "", err)
	}
	if err := p.store.Put(st); err != nil {
		return nil, fail(stepCheckpoint, "", fmt.Errorf("record PrepareStarted: %w", err))
	}
	if err := p.step(StepPrepareStarted, claim.UID); err != nil {
		return nil, &crashError{err}
	}
	// From here on, a failure undoes exactly what this attempt did.
	defer func() {
		if err == nil {
			return
		}
		var crash *crashError
		if errors.As(err, &crash) {
			return
		}
		if rerr := p.rollback(ctx, st, false); rerr != nil {
			p.metrics.stepError(opPrepare, stepRollback)
			err = fmt.Errorf("%w; %w", err, fail(stepRollback, "", rerr))
		}
	}()

	// 2. Dynamic MIG instances.
	for i, d := range ours {
		pd := &st.Devices[i]
		if d.profile == nil || !pd.MIG.Created {
			continue
		}
		in, err := p.mig.Create(ctx, d.gpu.UUID, d.profile.Name, d.placement)
		if err != nil {
			return nil, p.stepFail(opPrepare, stepMIGCreate, d.result.Device, err)
		}
		pd.MIG.GIID, pd.MIG.CIID, pd.MIG.UUID = in.GIID, in.CIID, in.UUID
		migUUIDs[d.result.Device] = in.UUID
		migIDs[d.result.Device] = cdi.MIGDevice{GI: in.GIID, CI: in.CIID}
		logger.V(2).Info("Created MIG instance", "device", d.result.Device, "migUUID", in.UUID, "gi", in.GIID, "ci", in.CIID)
		if err := p.step(StepMIGCreated, claim.UID); err != nil {
			return nil, &crashError{err}
		}
	}

	// 3. Sharing: host changes, then their record.
	rec, err := p.sharing.Prepare(ctx, claim, p.sharingLookup(ours, migUUIDs))
	if err != nil {
		return nil, p.stepFail(opPrepare, stepSharing, "", err)
	}
	if err := setSharing(&st, rec, true); err != nil {
		return nil, p.stepFail(opPrepare, stepCheckpoint, "", err)
	}
	if err := p.step(StepSharingApplied, claim.UID); err != nil {
		return nil, &crashError{err}
	}
	if hostChanges(rec) || anyCreated(st) {
		if err := p.store.Put(st); err != nil {
			return nil, p.stepFail(opPrepare, stepCheckpoint, "", fmt.Errorf("record sharing: %w", err))
		}
	}
	if err := p.step(StepSharingRecorded, claim.UID); err != nil {
		return nil, &crashError{err}
	}

	// 4. CDI spec.
	cds := cdi.ClaimDevices{ClaimUID: uid}
	for i, d := range ours {
		cd := cdi.Device{Name: d.result.Device, GPUMinor: d.gpu.Minor, UUID: d.gpu.UUID}
		if ids, ok := migIDs[d.result.Device]; ok {
			cd.MIG = &ids
			cd.UUID = migUUIDs[d.result.Device]
		}
		if e := editsFor(rec, st.Devices[i]); e != nil {
			cd.Edits = e
		}
		cds.Devices = append(cds.Devices, cd)
	}
	spec, err := p.gen.Generate(cds)
	if err != nil {
		return nil, p.stepFail(opPrepare, stepCDIGenerate, "", err)
	}
	if _, err := p.writer.Write(spec); err != nil {
		return nil, p.stepFail(opPrepare, stepCDIWrite, "", err)
	}
	if err := p.step(StepCDIWritten, claim.UID); err != nil {
		return nil, &crashError{err}
	}

	// 5. Done.
	for i := range st.Devices {
		id, ok := spec.DeviceIDs[st.Devices[i].Device]
		if !ok {
			return nil, p.stepFail(opPrepare, stepCDIGenerate, st.Devices[i].Device, errors.New("the spec has no device for it"))
		}
		st.Devices[i].CDIDeviceIDs = []string{id}
	}
	st.Phase = checkpoint.PrepareCompleted
	if err := p.store.Put(st); err != nil {
		return nil, p.stepFail(opPrepare, stepCheckpoint, "", fmt.Errorf("record PrepareCompleted: %w", err))
	}
	if err := p.step(StepPrepareCompleted, claim.UID); err != nil {
		return nil, &crashError{err}
	}
	return p.resultFromState(claim, st), nil
}

func (p *Plugin) stepFail(op, step, device string, err error) error {
	p.metrics.stepError(op, step)
	return fail(step, device, err)
}

func hostChanges(rec *sharing.Record) bool { return rec != nil && len(rec.Steps) > 0 }

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

// sharingLookup describes the claim's devices to the sharing engine. A dynamic MIG device
// that does not exist yet gets a placeholder UUID (only Plan sees it).
func (p *Plugin) sharingLookup(ours []prepDevice, migUUIDs map[string]string) sharing.DeviceLookup {
	byName := make(map[string]sharing.Device, len(ours))
	for _, d := range ours {
		sd := sharing.Device{Name: d.result.Device, UUID: d.gpu.UUID, Index: d.gpu.Index,
			MemoryBytes: d.gpu.MemoryBytes, ComputeCapabilityMajor: ccMajor(d.gpu.CudaComputeCapability)}
		switch {
		case d.static != nil:
			sd.IsMIG, sd.ParentUUID, sd.UUID, sd.MemoryBytes = true, d.gpu.UUID, d.static.UUID, d.static.MemoryBytes
		case d.profile != nil:
			sd.IsMIG, sd.ParentUUID, sd.MemoryBytes = true, d.gpu.UUID, d.profile.MemoryMiB<<20
			sd.UUID = migUUIDs[d.result.Device]
			if sd.UUID == "" {
				sd.UUID = "MIG-planned-" + d.result.Device
			}
		}
		byName[d.result.Device] = sd
	}
	return func(_, name string) (sharing.Device, bool) {
		d, ok := byName[name]
		return d, ok
	}
}

func ccMajor(cc string) int {
	major, _, _ := strings.Cut(cc, ".")
	n, _ := strconv.Atoi(major)
	return n
}

// rollback undoes a prepare recorded in st and forgets the claim: CDI spec, sharing, created
// MIG instances (newest first). recovering says st comes from an earlier process (or attempt)
// whose sharing host changes may be unrecorded; their planned settings are then reset. When a
// step fails the others still run and the claim stays recorded, so the rollback is retried.
func (p *Plugin) rollback(ctx context.Context, st checkpoint.ClaimState, recovering bool) error {
	logger := klog.FromContext(ctx)
	var errs []error
	if err := p.writer.Remove(st.UID); err != nil {
		errs = append(errs, fail(stepCDIRemove, "", err))
	}
	ss, err := sharingOf(st)
	if err != nil {
		errs = append(errs, fail(stepSharingUndo, "", err))
	}
	if ss != nil {
		rec := ss.Record
		if !ss.Applied {
			rec = nil
			if recovering {
				rec = resetRecord(ss.Record)
			}
		}
		if rec != nil {
			if err := p.sharing.Undo(ctx, rec); err != nil {
				errs = append(errs, fail(stepSharingUndo, "", err))
			}
		}
	}
	for i := len(st.Devices) - 1; i >= 0; i-- {
		d := st.Devices[i]
		if d.MIG == nil || !d.MIG.Created {
			continue
		}
		if owner, taken := p.ownerOf(d.MIG.ParentUUID, d.MIG.Placement.Start, st.UID); taken {
			logger.Info("Not destroying MIG instance recorded for another claim", "device", d.Device, "otherClaim", owner)
			continue
		}
		if err := p.destroyMIG(ctx, d); err != nil {
			errs = append(errs, fail(stepMIGDestroy, d.Device, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := p.store.Delete(st.UID); err != nil {
		return fail(stepCheckpoint, "", err)
	}
	logger.V(2).Info("Rolled back claim", "claimUID", st.UID, "devices", len(st.Devices))
	return nil
}

func (p *Plugin) destroyMIG(ctx context.Context, d checkpoint.PreparedDevice) error {
	if p.mig == nil {
		return errors.New("no MIG controller configured")
	}
	return p.mig.Destroy(ctx, d.MIG.ParentUUID, d.MIG.Profile, mig.Placement{Start: d.MIG.Placement.Start, Size: d.MIG.Placement.Size})
}

// resetRecord turns a sharing plan into a record whose undo puts the planned host settings back
// to their defaults: time slice Default, compute mode DEFAULT, MPS daemons stopped. It is used
// when a crash may have left host changes that were never recorded. Settings that another
// prepared claim holds are left alone by the engine's Undo.
func resetRecord(plan *sharing.Record) *sharing.Record {
	if plan == nil {
		return nil
	}
	rec := plan.DeepCopy()
	rec.Steps = nil
	def := sharing.ComputeModeDefault
	seen := map[string]bool{}
	for _, d := range rec.Devices {
		if d.TimeSlice == nil || seen["ts/"+d.UUID] {
			continue
		}
		seen["ts/"+d.UUID] = true
		v := *d.TimeSlice
		rec.Steps = append(rec.Steps, sharing.Step{Action: sharing.ActionSetTimeSlice, Resource: "timeSlice/" + d.UUID, UUID: d.UUID, TimeSlice: &v, Changed: true})
	}
	daemons := map[string]*sharing.MPSDaemonSpec{}
	var order []string
	for _, d := range rec.Devices {
		if d.MPSDaemonID == "" {
			continue
		}
		spec, ok := daemons[d.MPSDaemonID]
		if !ok {
			spec = &sharing.MPSDaemonSpec{ID: d.MPSDaemonID}
			for _, m := range d.Edits.Mounts {
				if m != nil && m.ContainerPath == sharing.MPSPipeContainerPath {
					spec.PipeDir = m.HostPath
					spec.Dir = strings.TrimSuffix(m.HostPath, "/pipe")
					spec.LogDir = spec.Dir + "/log"
					spec.ShmDir = spec.Dir + "/shm"
				}
			}
			daemons[d.MPSDaemonID] = spec
			order = append(order, d.MPSDaemonID)
		}
		if !slices.Contains(spec.DeviceUUIDs, d.UUID) {
			spec.DeviceUUIDs = append(spec.DeviceUUIDs, d.UUID)
		}
	}
	for _, id := range order {
		spec := daemons[id]
		for _, u := range spec.DeviceUUIDs {
			if seen["cm/"+u] {
				continue
			}
			seen["cm/"+u] = true
			excl := sharing.ComputeModeExclusiveProcess
			rec.Steps = append(rec.Steps, sharing.Step{Action: sharing.ActionSetComputeMode, Resource: "computeMode/" + u, UUID: u,
				ComputeMode: &excl, PreviousComputeMode: &def, Changed: true})
		}
		rec.Steps = append(rec.Steps, sharing.Step{Action: sharing.ActionStartMPSDaemon, Resource: "mpsDaemon/" + id, Daemon: spec, Changed: true})
	}
	if len(rec.Steps) == 0 {
		return nil
	}
	return rec
}

// unprepareClaim unprepares one claim.
func (p *Plugin) unprepareClaim(ctx context.Context, claim kubeletplugin.NamespacedObject) error {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(claim.Namespace, claim.Name), "claimUID", claim.UID)
	ctx = klog.NewContext(ctx, logger)
	start := p.now()
	err := p.unprepare(ctx, claim)
	p.metrics.observe(opUnprepare, p.now().Sub(start), err)
	if err != nil {
		err = fmt.Errorf("unprepare claim %s: %w", claimRef(claim.Namespace, claim.Name, claim.UID), err)
		logger.Error(err, "Unprepare failed")
		return err
	}
	logger.V(2).Info("Unprepared claim", "duration", p.now().Sub(start))
	return nil
}

func (p *Plugin) unprepare(ctx context.Context, claim kubeletplugin.NamespacedObject) error {
	uid := string(claim.UID)
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return fail(stepValidate, "", err)
	}
	st, ok := p.store.Get(uid)
	if !ok {
		return nil
	}
	gpus := make([]string, 0, len(st.Devices))
	for _, d := range st.Devices {
		gpus = append(gpus, d.GPUUUID)
	}
	unlock := p.lockGPUs(gpus)
	defer unlock()
	st, ok = p.store.Get(uid)
	if !ok {
		return nil
	}
	switch st.Phase {
	case checkpoint.PrepareStarted:
		return p.rollback(ctx, st, true)
	case checkpoint.PrepareCompleted:
		st.Phase = checkpoint.UnprepareStarted
		if err := p.store.Put(st); err != nil {
			return p.stepFail(opUnprepare, stepCheckpoint, "", fmt.Errorf("record UnprepareStarted: %w", err))
		}
		if err := p.step(StepUnprepareStarted, claim.UID); err != nil {
			return err
		}
	}
	return p.finishUnprepare(ctx, st)
}

// finishUnprepare runs the unprepare steps of a claim in UnprepareStarted, in the reverse order of
// prepare. Missing pieces (spec already gone, instance already destroyed) are fine.
func (p *Plugin) finishUnprepare(ctx context.Context, st checkpoint.ClaimState) error {
	logger := klog.FromContext(ctx)
	uid := types.UID(st.UID)
	if err := p.writer.Remove(st.UID); err != nil {
		return p.stepFail(opUnprepare, stepCDIRemove, "", err)
	}
	if err := p.step(StepCDIRemoved, uid); err != nil {
		return err
	}
	ss, err := sharingOf(st)
	if err != nil {
		return p.stepFail(opUnprepare, stepSharingUndo, "", err)
	}
	if ss != nil && ss.Applied {
		if err := p.sharing.Undo(ctx, ss.Record); err != nil {
			return p.stepFail(opUnprepare, stepSharingUndo, "", err)
		}
	}
	if err := p.step(StepSharingUndone, uid); err != nil {
		return err
	}
	for i := len(st.Devices) - 1; i >= 0; i-- {
		d := st.Devices[i]
		if d.MIG == nil || !d.MIG.Created {
			continue
		}
		if err := p.destroyMIG(ctx, d); err != nil {
			return p.stepFail(opUnprepare, stepMIGDestroy, d.Device, err)
		}
		logger.V(2).Info("Destroyed MIG instance", "device", d.Device, "migUUID", d.MIG.UUID)
		if err := p.step(StepMIGDestroyed, uid); err != nil {
			return err
		}
	}
	if err := p.store.Delete(st.UID); err != nil {
		return p.stepFail(opUnprepare, stepCheckpoint, "", err)
	}
	return p.step(StepUnprepareCompleted, uid)
}
