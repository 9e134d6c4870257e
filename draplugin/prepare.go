package draplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/claimstate"
	"github.com/gpudra/gpudra/internal/crashpoint"
	"github.com/gpudra/gpudra/sharing"
)

// prepDevice is one of our allocation results being prepared, with what it is on the node.
type prepDevice struct {
	result resourceapi.DeviceRequestAllocationResult
	gpudra.PublishedDevice
}

// prepareClaim prepares one claim and turns any error into the claim's result.
func (p *Plugin) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "claimUID", claim.UID)
	ctx = klog.NewContext(ctx, logger)
	start := p.now()
	devices, err := p.prepare(ctx, claim)
	p.metrics.observe(OpPrepare, p.now().Sub(start), err)
	if err != nil {
		err = fmt.Errorf("prepare claim %s: %w", claimstate.ClaimRef(claim.Namespace, claim.Name, claim.UID), err)
		logger.Error(err, "Prepare failed")
		return kubeletplugin.PrepareResult{Err: err}
	}
	logger.V(2).Info("Prepared claim", "devices", len(devices), "duration", p.now().Sub(start))
	p.queueDeviceStatus(ctx, claim)
	return kubeletplugin.PrepareResult{Devices: devices}
}

// queueDeviceStatus has the status writer (when Start runs one) describe the claim's devices
// in its status.
func (p *Plugin) queueDeviceStatus(ctx context.Context, claim *resourceapi.ResourceClaim) {
	if p.status == nil {
		return
	}
	st, ok := p.store.Get(string(claim.UID))
	if !ok || len(st.Devices) == 0 {
		return
	}
	if err := p.status.prepared(st, claimstate.ShareIDs(claim, p.driverName)); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot describe the prepared devices in the claim's status")
	}
}

func (p *Plugin) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if err := cdi.ValidateClaimUID(string(claim.UID)); err != nil {
		return nil, stepErr(StepValidate, "", err)
	}
	if claim.Status.Allocation == nil {
		return nil, stepErr(StepValidate, "", errors.New("claim is not allocated"))
	}
	ours, err := p.ourDevices(claim)
	if err != nil || len(ours) == 0 {
		return nil, err
	}
	gpus := make([]string, 0, len(ours))
	for _, d := range ours {
		gpus = append(gpus, d.GPU.UUID)
	}
	// Interrupted prepares of other claims on these GPUs are rolled back first (below), which
	// needs the locks of all their GPUs.
	locked := slices.Clone(gpus)
	for _, c := range p.interruptedOn(gpus, claim.UID) {
		locked = append(locked, claimGPUs(c)...)
	}
	unlock, err := p.lockGPUs(locked)
	if err != nil {
		return nil, stepErr(StepLock, "", err)
	}
	defer unlock()
	// The wait for the locks can outlast kubelet's call (another claim's long MIG or MPS step,
	// the other pod of a rolling update). Kubelet has given up then and may already have
	// unprepared the claim, finding nothing: a prepare that went on would leave a claim
	// nobody unprepares.
	if err := ctx.Err(); err != nil {
		return nil, stepErr(StepLock, "", fmt.Errorf("gave up while waiting for the GPU locks: %w", context.Cause(ctx)))
	}
	p.rollBackInterrupted(ctx, gpus, locked, claim.UID)
	if devices, done, err := p.resume(ctx, claim, ours); done || err != nil {
		return devices, err
	}
	return p.prepareLocked(ctx, claim, ours)
}

// interruptedOn returns the claims other than except whose prepare was interrupted (a crash of
// this or another plugin process, a failed rollback) on any of the GPUs.
func (p *Plugin) interruptedOn(gpus []string, except types.UID) []checkpoint.ClaimState {
	return p.store.ListFunc(func(c *checkpoint.ClaimState) bool {
		return c.Phase == checkpoint.PrepareStarted && c.UID != string(except) &&
			slices.ContainsFunc(c.Devices, func(d checkpoint.PreparedDevice) bool { return slices.Contains(gpus, d.GPUUUID) })
	})
}

// rollBackInterrupted rolls back the interrupted prepares of other claims on the GPUs a prepare
// is about to use, with the locks of locked held. Such a prepare may have made host changes
// that no prepared claim's record holds (the sharing registry knows only applied records): a
// claim sharing the GPU now would take them for the host's own settings and never restore them.
// Holding a claim's GPU locks proves that its prepare is not under way, in any process: a
// prepare holds them from recording its intent until it completes or is rolled back. It is a
// clean-up on the way, not a condition: a rollback that fails (a host setting that cannot be
// restored) is logged and left to kubelet's retry of that claim or to its unprepare, and does
// not stop other claims from being prepared on the GPU.
func (p *Plugin) rollBackInterrupted(ctx context.Context, gpus, locked []string, except types.UID) {
	logger := klog.FromContext(ctx)
	for _, c := range p.interruptedOn(gpus, except) {
		ref := claimstate.Ref(c)
		if missing := slices.DeleteFunc(claimGPUs(c), func(u string) bool { return slices.Contains(locked, u) }); len(missing) > 0 {
			// It appeared after the locks were chosen; the next prepare on these GPUs locks them.
			logger.Info("Not rolling back an interrupted prepare of another claim: it also holds GPUs not locked", "interruptedClaim", ref, "gpus", missing)
			continue
		}
		cctx := klog.NewContext(ctx, logger.WithValues("interruptedClaim", ref))
		if err := p.rollback(cctx, c, true, stepDurability); err != nil {
			logger.Error(err, "Rolling back an interrupted prepare of another claim on the same GPUs failed", "interruptedClaim", ref)
			continue
		}
		logger.Info("Rolled back an interrupted prepare of another claim on the same GPUs", "interruptedClaim", ref)
	}
}

// ourDevices resolves the claim's allocation results of this driver to published devices.
func (p *Plugin) ourDevices(claim *resourceapi.ResourceClaim) ([]prepDevice, error) {
	var ours []prepDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != p.driverName {
			continue
		}
		if r.Pool != p.nodeName {
			return nil, stepErr(StepResolve, r.Device, fmt.Errorf("the device is in pool %q, but this plugin serves pool %q of node %s: the claim was allocated on another node", r.Pool, p.nodeName, p.nodeName))
		}
		d, ok := p.devices.lookup(r.Device)
		if !ok {
			return nil, stepErr(StepResolve, r.Device, fmt.Errorf("device %q is not published by this plugin on node %s", r.Device, p.nodeName))
		}
		ours = append(ours, prepDevice{result: r, PublishedDevice: d})
	}
	return ours, nil
}

// resume handles a claim the checkpoint already holds: a completed prepare is answered from
// the checkpoint (done); an interrupted prepare is rolled back and an interrupted unprepare
// finished, so that prepare starts afresh.
func (p *Plugin) resume(ctx context.Context, claim *resourceapi.ResourceClaim, ours []prepDevice) ([]kubeletplugin.Device, bool, error) {
	st, ok := p.store.Get(string(claim.UID))
	if !ok {
		return nil, false, nil
	}
	switch st.Phase {
	case checkpoint.PrepareCompleted:
		if st.Recovered {
			return p.completeRecovered(ctx, claim, st, ours)
		}
		if err := claimstate.SameAllocation(st, resultsOf(ours)); err != nil {
			return nil, false, stepErr(StepValidate, "", err)
		}
		klog.FromContext(ctx).V(3).Info("Claim already prepared, returning the recorded devices")
		return p.resultFromState(claim, st), true, nil
	case checkpoint.PrepareStarted:
		if err := p.rollback(ctx, st, true, stepDurability); err != nil {
			return nil, false, stepErr(StepRecover, "", err)
		}
	case checkpoint.UnprepareStarted:
		if err := p.finishUnprepare(ctx, st, stepDurability); err != nil {
			return nil, false, stepErr(StepRecover, "", err)
		}
	}
	return nil, false, nil
}

// completeRecovered fills in what the CDI spec of a recovered claim could not say (request
// names, namespace and name) from the claim kubelet prepares again, and answers from it.
func (p *Plugin) completeRecovered(ctx context.Context, claim *resourceapi.ResourceClaim, st checkpoint.ClaimState, ours []prepDevice) ([]kubeletplugin.Device, bool, error) {
	st, err := claimstate.CompleteRecovered(st, claim, resultsOf(ours))
	if err != nil {
		return nil, false, stepErr(StepValidate, "", err)
	}
	if err := p.store.Put(st, stepDurability); err != nil {
		return nil, false, stepErr(StepCheckpoint, "", err)
	}
	klog.FromContext(ctx).Info("Claim recovered from its CDI spec is prepared again; its record is complete now")
	return p.resultFromState(claim, st), true, nil
}

// resultsOf are the allocation results of the devices.
func resultsOf(ours []prepDevice) []resourceapi.DeviceRequestAllocationResult {
	out := make([]resourceapi.DeviceRequestAllocationResult, 0, len(ours))
	for _, d := range ours {
		out = append(out, d.result)
	}
	return out
}

// resultFromState rebuilds the prepare result of a completed claim from the checkpoint.
func (p *Plugin) resultFromState(claim *resourceapi.ResourceClaim, st checkpoint.ClaimState) []kubeletplugin.Device {
	return claimstate.Result(st, claimstate.ShareIDs(claim, p.driverName))
}

// ownerOf returns the claim (other than except) that records an instance at the placement for
// its own use (admin access owns nothing).
func (p *Plugin) ownerOf(gpuUUID string, start int, except string) (string, bool) {
	for _, c := range p.store.List() {
		if c.UID == except {
			continue
		}
		for _, d := range c.Devices {
			if d.MIG != nil && !d.AdminAccess && d.MIG.ParentUUID == gpuUUID && d.MIG.Placement.Start == start {
				return claimstate.ClaimRef(c.Namespace, c.Name, types.UID(c.UID)), true
			}
		}
	}
	return "", false
}

// attempt is one prepare of one claim, with the GPU locks of its devices held.
type attempt struct {
	p     *Plugin
	claim *resourceapi.ResourceClaim
	ours  []prepDevice
	// st is the claim's checkpoint entry as it is being built.
	st checkpoint.ClaimState
	// mig holds, per DRA device name, the MIG device each dynamic or static MIG device became.
	mig map[string]migDevice
	// rec is the sharing record once sharing was applied.
	rec *sharing.Record
}

// migDevice is an existing MIG device: its UUID and NVML ids.
type migDevice struct {
	uuid string
	ids  cdi.MIGInstanceIDs
}

// prepareLocked runs the prepare steps with the claim's GPU locks held. Once the intent is
// recorded, a failure undoes exactly what this attempt did.
func (p *Plugin) prepareLocked(ctx context.Context, claim *resourceapi.ResourceClaim, ours []prepDevice) (_ []kubeletplugin.Device, err error) {
	a := &attempt{p: p, claim: claim, ours: ours, mig: map[string]migDevice{},
		st: checkpoint.ClaimState{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, Phase: checkpoint.PrepareStarted}}
	if err := a.recordIntent(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if err == nil || crashpoint.IsCrash(err) {
			return
		}
		if rerr := p.rollback(context.WithoutCancel(ctx), a.st, false, stepDurability); rerr != nil {
			p.metrics.stepError(OpPrepare, StepRollback)
			err = fmt.Errorf("%w; %w", err, stepErr(StepRollback, "", rerr))
		}
	}()
	for _, step := range []func(context.Context) error{a.createMIG, a.bindVFIO, a.applySharing, a.writeCDI, a.complete} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return p.resultFromState(claim, a.st), nil
}

// fail counts a failed step in the metrics and wraps its error.
func (a *attempt) fail(step Step, device string, err error) error {
	a.p.metrics.stepError(OpPrepare, step)
	return stepErr(step, device, err)
}

// recordIntent is step 1: it records the claim as PrepareStarted with its devices, the MIG
// instances to create (or reuse) and the sharing plan, before anything is done.
func (a *attempt) recordIntent(ctx context.Context) error {
	for _, d := range a.ours {
		pd, err := a.planDevice(ctx, d)
		if err != nil {
			return err
		}
		a.st.Devices = append(a.st.Devices, pd)
	}
	plan, err := a.p.sharing.Plan(ctx, a.claim, a.sharingLookup())
	if err != nil {
		return stepErr(StepPlanSharing, "", err)
	}
	if err := checkVFIOClaim(a.st, changesHost(plan)); err != nil {
		return err
	}
	if err := setSharing(&a.st, plan, false); err != nil {
		return stepErr(StepCheckpoint, "", err)
	}
	// A prepare that creates nothing and changes no host setting needs no record of its intent:
	// a crash can only leave its CDI spec, which reconciliation removes as the spec of a claim
	// the checkpoint does not hold. Nor does one whose host settings other prepared claims
	// already made and keep (a share joining a GPU's MPS daemon): a crash leaves them to those
	// claims. One that does change the host is recorded first, with the values its changes will
	// replace, so that a crash anywhere later is undone exactly.
	if anyCreated(a.st) || anyVFIO(a.st) || (changesHost(plan) && !a.p.sharing.Shared(plan)) {
		if err := a.p.store.Put(a.st, stepDurability); err != nil {
			return stepErr(StepCheckpoint, "", fmt.Errorf("record PrepareStarted: %w", err))
		}
	}
	return a.p.crashPoint(testhooks.CrashAfterPrepareStarted, a.claim.UID)
}

// planDevice is the checkpoint entry of one device before anything is done.
func (a *attempt) planDevice(ctx context.Context, d prepDevice) (checkpoint.PreparedDevice, error) {
	pd := checkpoint.PreparedDevice{Request: d.result.Request, Pool: d.result.Pool, Device: d.result.Device, GPUUUID: d.GPU.UUID,
		AdminAccess: ptr.Deref(d.result.AdminAccess, false)}
	switch {
	case d.MIG != nil:
		m := d.MIG
		pd.MIG = &checkpoint.MIGInstance{ParentUUID: d.GPU.UUID, Profile: m.Profile, GIProfileID: m.GIProfileID,
			CIProfileID: m.CIProfileID, Placement: checkpoint.Placement{Start: m.Placement.Start, Size: m.Placement.Size},
			GIID: m.GIID, CIID: m.CIID, UUID: m.UUID}
		a.mig[d.result.Device] = migDevice{uuid: m.UUID, ids: cdi.MIGInstanceIDs{GI: m.GIID, CI: m.CIID}}
	case d.Partition != nil:
		mi, err := a.planPartition(ctx, d)
		if err != nil {
			return pd, err
		}
		pd.MIG = mi
	case d.Passthrough != nil:
		if err := a.planVFIO(d, &pd); err != nil {
			return pd, err
		}
	}
	return pd, nil
}

// planPartition records the instance a dynamic MIG device needs: one this prepare creates, or,
// for admin access, the instance some other claim created there. An instance nobody prepared is
// never taken over: it may be another tool's, or a leak that reconciliation reports.
func (a *attempt) planPartition(ctx context.Context, d prepDevice) (*checkpoint.MIGInstance, error) {
	pt, dev, admin := d.Partition, d.result.Device, ptr.Deref(d.result.AdminAccess, false)
	if a.p.mig == nil {
		return nil, stepErr(StepCreateMIG, dev, errors.New("no MIG controller configured"))
	}
	owner, taken := a.p.ownerOf(d.GPU.UUID, pt.Placement.Start, a.st.UID)
	if taken && !admin {
		return nil, stepErr(StepCreateMIG, dev, fmt.Errorf("the instance at placement %d on GPU %s is prepared for claim %s", pt.Placement.Start, d.GPU.UUID, owner))
	}
	mi := &checkpoint.MIGInstance{ParentUUID: d.GPU.UUID, Profile: pt.Profile.Name, GIProfileID: pt.Profile.ID,
		Placement: checkpoint.Placement{Start: pt.Placement.Start, Size: pt.Placement.Size}, Created: !admin}
	existing, err := a.p.mig.Instances(ctx, d.GPU.UUID)
	if err != nil {
		return nil, stepErr(StepCreateMIG, dev, err)
	}
	i := slices.IndexFunc(existing, func(in MIGInstance) bool { return in.Placement.Overlaps(pt.Placement) })
	exact := i >= 0 && existing[i].Placement == pt.Placement && existing[i].GIProfileID == pt.Profile.ID && existing[i].UUID != ""
	switch {
	case admin && (!taken || !exact):
		return nil, stepErr(StepCreateMIG, dev, fmt.Errorf("admin access to %s needs the MIG instance a claim prepared there, and there is none: admin access never creates, destroys or reconfigures a device", dev))
	case admin:
		in := existing[i]
		mi.GIID, mi.CIID, mi.UUID = in.GIID, in.CIID, in.UUID
		a.mig[dev] = migDevice{uuid: in.UUID, ids: cdi.MIGInstanceIDs{GI: in.GIID, CI: in.CIID}}
	case i >= 0:
		in := existing[i]
		return nil, stepErr(StepCreateMIG, dev, fmt.Errorf("MIG instance %s at placement %d on GPU %s overlaps the partition and no claim prepared it: it is not taken over; remove it (nvidia-smi mig -dci/-dgi) or restart the plugin to have reconciliation report it",
			in.Profile, in.Placement.Start, d.GPU.UUID))
	}
	return mi, nil
}

// createMIG is step 2: it creates the dynamic MIG instances the intent records, and turns MIG
// mode off on a GPU published as dynamic partitions whose whole GPU the claim got: a GPU in MIG
// mode without instances shows CUDA no device at all.
func (a *attempt) createMIG(ctx context.Context) error {
	for i, d := range a.ours {
		pd := &a.st.Devices[i]
		if d.Partition == nil && d.MIG == nil && d.Passthrough == nil && a.p.devices.partitioned[d.GPU.UUID] && !pd.AdminAccess {
			if err := a.wholeGPU(ctx, d); err != nil {
				return a.fail(StepMIGMode, d.result.Device, err)
			}
			continue
		}
		if d.Partition == nil || !pd.MIG.Created {
			continue
		}
		in, err := a.p.mig.Create(ctx, d.GPU.UUID, d.Partition.Profile.Name, d.Partition.Placement)
		if err != nil {
			return a.fail(StepCreateMIG, d.result.Device, err)
		}
		pd.MIG.GIID, pd.MIG.CIID, pd.MIG.UUID = in.GIID, in.CIID, in.UUID
		a.mig[d.result.Device] = migDevice{uuid: in.UUID, ids: cdi.MIGInstanceIDs{GI: in.GIID, CI: in.CIID}}
		klog.FromContext(ctx).V(2).Info("Created MIG instance", "device", d.result.Device, "migUUID", in.UUID, "gi", in.GIID, "ci", in.CIID)
		if err := a.p.crashPoint(testhooks.CrashAfterMIGCreated, a.claim.UID); err != nil {
			return err
		}
	}
	return nil
}

// wholeGPU makes sure a GPU published as dynamic partitions is not in MIG mode.
func (a *attempt) wholeGPU(ctx context.Context, d prepDevice) error {
	if a.p.mig == nil {
		return errors.New("no MIG controller configured")
	}
	_, err := a.p.mig.DisableMIG(ctx, d.GPU.UUID)
	return err
}

// applySharing is step 3: the sharing engine's host changes.
func (a *attempt) applySharing(ctx context.Context) error {
	rec, err := a.p.sharing.Prepare(ctx, a.claim, a.sharingLookup())
	if err != nil {
		if rec != nil {
			// Host changes the engine could not undo: record them, so that the rollback (now or
			// after a crash) undoes them and the claim stays recorded until it has.
			if serr := setSharing(&a.st, rec, true); serr == nil {
				serr = a.p.store.Put(a.st, stepDurability)
				err = errors.Join(err, serr)
			}
		}
		return a.fail(StepApplySharing, "", err)
	}
	// The applied record is written with the completed claim: until then the recorded plan
	// holds every value a rollback must restore.
	a.rec = rec
	if err := setSharing(&a.st, rec, true); err != nil {
		return a.fail(StepCheckpoint, "", err)
	}
	return a.p.crashPoint(testhooks.CrashAfterSharingApplied, a.claim.UID)
}

// writeCDI is step 4: the claim's CDI spec, with the device IDs recorded in the entry.
func (a *attempt) writeCDI(_ context.Context) error {
	if anyVFIO(a.st) {
		return a.writeVFIOCDI()
	}
	cds := cdi.ClaimDevices{ClaimUID: a.st.UID}
	for i, d := range a.ours {
		cd := cdiDevice(d.PublishedDevice)
		if m, ok := a.mig[d.result.Device]; ok { // the MIG instance: existing, or created for a partition
			cd.MIG, cd.UUID = &m.ids, m.uuid
		}
		cd.Edits = editsFor(a.rec, a.st.Devices[i])
		cds.Devices = append(cds.Devices, cd)
	}
	spec, err := a.p.gen.Generate(cds)
	if err != nil {
		return a.fail(StepGenerateCDI, "", err)
	}
	for i := range a.st.Devices {
		id, ok := spec.DeviceIDs[a.st.Devices[i].Device]
		if !ok {
			return a.fail(StepGenerateCDI, a.st.Devices[i].Device, errors.New("the spec has no device for it"))
		}
		a.st.Devices[i].CDIDeviceIDs = []string{id}
	}
	if _, err := a.p.writer.Write(spec); err != nil {
		return a.fail(StepWriteCDI, "", err)
	}
	return a.p.crashPoint(testhooks.CrashAfterCDIWritten, a.claim.UID)
}

// complete is step 5: the claim is recorded as PrepareCompleted.
func (a *attempt) complete(_ context.Context) error {
	a.st.Phase = checkpoint.PrepareCompleted
	if err := a.p.store.Put(a.st, stepDurability); err != nil {
		return a.fail(StepCheckpoint, "", fmt.Errorf("record PrepareCompleted: %w", err))
	}
	return a.p.crashPoint(testhooks.CrashAfterPrepareCompleted, a.claim.UID)
}

// sharingLookup describes the claim's devices to the sharing engine. A dynamic MIG device
// that does not exist yet gets a placeholder UUID (only Plan sees it).
func (a *attempt) sharingLookup() sharing.DeviceLookup {
	byName := make(map[string]sharing.Device, len(a.ours))
	for _, d := range a.ours {
		g := d.GPU
		sd := sharing.Device{Name: d.result.Device, UUID: g.UUID, Index: g.Index,
			MemoryBytes: g.MemoryBytes}
		switch {
		case d.MIG != nil:
			sd.IsMIG, sd.ParentUUID, sd.UUID, sd.MemoryBytes = true, g.UUID, d.MIG.UUID, d.MIG.MemoryBytes
		case d.Partition != nil:
			sd.IsMIG, sd.ParentUUID, sd.MemoryBytes = true, g.UUID, d.Partition.Profile.MemoryMiB<<20
			sd.UUID = a.mig[d.result.Device].uuid
			if sd.UUID == "" {
				sd.UUID, sd.Planned = "MIG-planned-"+d.result.Device, true
			}
		}
		byName[d.result.Device] = sd
	}
	return func(_, name string) (sharing.Device, bool) {
		d, ok := byName[name]
		return d, ok
	}
}
