package draplugin

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/claimstate"
	"github.com/gpudra/gpudra/internal/crashpoint"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/sharing"
)

// unprepareClaim unprepares one claim.
func (p *Plugin) unprepareClaim(ctx context.Context, claim kubeletplugin.NamespacedObject) error {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(claim.Namespace, claim.Name), "claimUID", claim.UID)
	ctx = klog.NewContext(ctx, logger)
	start := p.now()
	err := p.unprepare(ctx, claim)
	p.metrics.observe(OpUnprepare, p.now().Sub(start), err)
	if err != nil {
		err = fmt.Errorf("unprepare claim %s: %w", claimstate.ClaimRef(claim.Namespace, claim.Name, claim.UID), err)
		logger.Error(err, "Unprepare failed")
		return err
	}
	logger.V(2).Info("Unprepared claim", "duration", p.now().Sub(start))
	if p.status != nil {
		p.status.unprepared(claim.Namespace, claim.Name, claim.UID)
	}
	return nil
}

func (p *Plugin) unprepare(ctx context.Context, claim kubeletplugin.NamespacedObject) error {
	uid := string(claim.UID)
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return stepErr(StepValidate, "", err)
	}
	// The claim may have been prepared by another process (rolling update): look it up on disk.
	if err := p.store.Refresh(); err != nil {
		return stepErr(StepCheckpoint, "", err)
	}
	st, ok := p.store.Get(uid)
	lock := func() (func(), error) { return p.lockGPUs(claimGPUs(st)) }
	if !ok {
		// Not recorded: never prepared, or its prepare has not recorded anything yet. Which GPUs
		// such a prepare waits for or works on is not known here, so wait for every GPU: once
		// they are held, no prepare of the claim is under way in any process, and one still
		// waiting finds its call cancelled (kubelet unprepares only claims whose prepare it
		// gave up on or finished).
		lock = p.lockAll
	}
	unlock, err := lock()
	if err != nil {
		return stepErr(StepLock, "", err)
	}
	defer unlock()
	if st, ok = p.store.Get(uid); !ok {
		return p.removeUnrecordedSpec(uid)
	}
	switch st.Phase {
	case checkpoint.PrepareStarted:
		return p.rollback(ctx, st, true, stepDurability)
	case checkpoint.PrepareCompleted:
		if plainUnprepare(st) || p.sharedUnprepare(st) {
			break
		}
		st.Phase = checkpoint.UnprepareStarted
		if err := p.store.Put(st, stepDurability); err != nil {
			return p.unprepareFail(StepCheckpoint, "", fmt.Errorf("record UnprepareStarted: %w", err))
		}
		if err := p.crashPoint(testhooks.CrashAfterUnprepareStarted, claim.UID); err != nil {
			return err
		}
	}
	return p.finishUnprepare(ctx, st, stepDurability)
}

// plainUnprepare reports whether unpreparing the claim only removes its CDI spec and its entry:
// no MIG instance to destroy and no sharing record (a claim of plainly exclusive devices stores
// none, see sharingState). Such an unprepare records no intent, as the prepare of such a claim
// records none: a crash between the spec's removal and the entry's leaves a completed claim
// without a spec, which reconciliation writes again, and kubelet retries the unprepare it got
// no answer for.
func plainUnprepare(st checkpoint.ClaimState) bool {
	return len(st.Devices) > 0 && st.Devices[0].Sharing == nil && !anyCreated(st) && !anyVFIO(st)
}

// sharedUnprepare reports whether unpreparing the claim changes nothing on the host: no MIG
// instance to destroy, and every host setting its sharing record holds is held by another
// prepared claim too, so Undo only leaves the claim's share. Like a plain one, such an unprepare
// records no intent: a crash leaves the completed entry (its spec rewritten by reconciliation)
// and kubelet retries.
func (p *Plugin) sharedUnprepare(st checkpoint.ClaimState) bool {
	ss, err := sharingOf(st)
	if err != nil || ss == nil || !ss.Applied || anyCreated(st) || anyVFIO(st) {
		return false
	}
	return p.sharing.Shared(ss.Record)
}

// removeUnrecordedSpec removes the CDI spec of a claim the checkpoint does not hold. A prepare
// that creates nothing and changes no host setting records no intent, so a crash after its spec
// was written leaves the spec alone; when another plugin process serves kubelet meanwhile (a
// rolling update), no reconciliation runs before kubelet gives up on the claim and unprepares
// it, and this is the last chance to remove the spec. No spec is fine.
func (p *Plugin) removeUnrecordedSpec(uid string) error {
	if err := p.writer.Remove(uid); err != nil {
		return p.unprepareFail(StepRemoveCDI, "", err)
	}
	return nil
}

func (p *Plugin) unprepareFail(step Step, device string, err error) error {
	p.metrics.stepError(OpUnprepare, step)
	return stepErr(step, device, err)
}

// finishUnprepare runs the unprepare steps of a claim in UnprepareStarted, in the reverse order
// of prepare, and forgets the claim with durability d. Missing pieces (spec already gone,
// instance already destroyed) are fine.
func (p *Plugin) finishUnprepare(ctx context.Context, st checkpoint.ClaimState, d atomicfile.Durability) error {
	uid := types.UID(st.UID)
	if err := p.writer.Remove(st.UID); err != nil {
		return p.unprepareFail(StepRemoveCDI, "", err)
	}
	if err := p.crashPoint(testhooks.CrashAfterCDIRemoved, uid); err != nil {
		return err
	}
	ss, err := sharingOf(st)
	if err != nil {
		return p.unprepareFail(StepUndoSharing, "", err)
	}
	if ss != nil && ss.Applied {
		if err := p.sharing.Undo(ctx, ss.Record); err != nil {
			p.recordLeft(ctx, st, err)
			return p.unprepareFail(StepUndoSharing, "", err)
		}
	}
	if err := p.crashPoint(testhooks.CrashAfterSharingUndone, uid); err != nil {
		return err
	}
	if err := p.unbindVFIO(ctx, st); err != nil {
		if !crashpoint.IsCrash(err) {
			p.metrics.stepError(OpUnprepare, StepUnbindVFIO)
		}
		return err
	}
	if err := p.destroyCreated(ctx, st); err != nil {
		return err
	}
	if err := p.store.Delete(st.UID, d); err != nil {
		return p.unprepareFail(StepCheckpoint, "", err)
	}
	return p.crashPoint(testhooks.CrashAfterUnprepareCompleted, uid)
}

// destroyCreated destroys the MIG instances the plugin created for the claim, newest first.
func (p *Plugin) destroyCreated(ctx context.Context, st checkpoint.ClaimState) error {
	for i := len(st.Devices) - 1; i >= 0; i-- {
		d := st.Devices[i]
		if d.MIG == nil || !d.MIG.Created {
			continue
		}
		// Two claims can both record one instance as theirs only after a lost checkpoint: the
		// CDI specs adopted then do not say which claim created it (an admin-access claim names
		// the same partition). The last one to go destroys it.
		if owner, taken := p.ownerOf(d.MIG.ParentUUID, d.MIG.Placement.Start, st.UID); taken {
			klog.FromContext(ctx).Info("Not destroying MIG instance another claim records", "device", d.Device, "otherClaim", owner)
			continue
		}
		if err := p.destroyMIG(ctx, d); err != nil {
			return p.unprepareFail(StepDestroyMIG, d.Device, err)
		}
		klog.FromContext(ctx).V(2).Info("Destroyed MIG instance", "device", d.Device, "migUUID", d.MIG.UUID)
		if err := p.crashPoint(testhooks.CrashAfterMIGDestroyed, types.UID(st.UID)); err != nil {
			return err
		}
	}
	return nil
}

// rollback undoes a prepare recorded in st and forgets the claim, with durability d: CDI spec,
// sharing, created MIG instances (newest first). recovering says st comes from an earlier
// process (or attempt) whose sharing host changes may be unrecorded; their planned settings are
// then reset. When a step fails the others still run and the claim stays recorded, so the
// rollback is retried.
func (p *Plugin) rollback(ctx context.Context, st checkpoint.ClaimState, recovering bool, d atomicfile.Durability) error {
	var errs []error
	if err := p.writer.Remove(st.UID); err != nil {
		errs = append(errs, stepErr(StepRemoveCDI, "", err))
	}
	if err := p.rollbackSharing(ctx, st, recovering); err != nil {
		errs = append(errs, err)
	}
	if err := p.unbindVFIO(ctx, st); err != nil {
		if crashpoint.IsCrash(err) {
			return err
		}
		errs = append(errs, err)
	}
	for i := len(st.Devices) - 1; i >= 0; i-- {
		d := st.Devices[i]
		if d.MIG == nil || !d.MIG.Created {
			continue
		}
		if owner, taken := p.ownerOf(d.MIG.ParentUUID, d.MIG.Placement.Start, st.UID); taken {
			klog.FromContext(ctx).Info("Not destroying MIG instance recorded for another claim", "device", d.Device, "otherClaim", owner)
			continue
		}
		if err := p.destroyMIG(ctx, d); err != nil {
			errs = append(errs, stepErr(StepDestroyMIG, d.Device, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := p.store.Delete(st.UID, d); err != nil {
		return stepErr(StepCheckpoint, "", err)
	}
	klog.FromContext(ctx).V(2).Info("Rolled back claim", "claimUID", st.UID, "devices", len(st.Devices))
	return nil
}

// rollbackSharing undoes the sharing of a claim being rolled back: the applied record, or,
// when only the plan was recorded and an earlier attempt may have made its host changes, the
// reset of the planned settings.
func (p *Plugin) rollbackSharing(ctx context.Context, st checkpoint.ClaimState, recovering bool) error {
	ss, err := sharingOf(st)
	if err != nil {
		return stepErr(StepUndoSharing, "", err)
	}
	if ss == nil {
		return nil
	}
	rec := ss.Record
	if !ss.Applied {
		rec = nil
		if recovering {
			rec = p.sharing.ResetPlan(ss.Record)
		}
	}
	if rec == nil {
		return nil
	}
	if err := p.sharing.Undo(ctx, rec); err != nil {
		p.recordLeft(ctx, st, err)
		return stepErr(StepUndoSharing, "", err)
	}
	return nil
}

// recordLeft records, after a failed Undo of an interrupted or unpreparing claim, only the host
// changes still on the host in place of its sharing record: the sharing engine of this process
// holds just those now, and a restart or the other pod of a rolling update, which rebuild it
// from the checkpoint, must not count the undone ones (an MPS daemon already stopped) as held.
// The next attempt undoes what is left.
func (p *Plugin) recordLeft(ctx context.Context, st checkpoint.ClaimState, undoErr error) {
	var ue *sharing.UndoError
	if !errors.As(undoErr, &ue) || ue.Left == nil || st.Phase == checkpoint.PrepareCompleted {
		return
	}
	err := setSharing(&st, ue.Left, true)
	if err == nil {
		err = p.store.Put(st, stepDurability)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot record which host changes are left to undo; the next attempt undoes them all again")
	}
}

func (p *Plugin) destroyMIG(ctx context.Context, d checkpoint.PreparedDevice) error {
	if p.mig == nil {
		return errors.New("no MIG controller configured")
	}
	return p.mig.Destroy(ctx, d.MIG.ParentUUID, d.MIG.Profile, mig.Placement{Start: d.MIG.Placement.Start, Size: d.MIG.Placement.Size})
}

func claimGPUs(c checkpoint.ClaimState) []string {
	out := make([]string, 0, len(c.Devices))
	for _, d := range c.Devices {
		if d.GPUUUID != "" {
			out = append(out, d.GPUUUID)
		}
	}
	return out
}
