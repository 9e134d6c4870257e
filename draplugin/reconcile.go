package draplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/claimstate"
	"github.com/gpudra/gpudra/internal/reconcile"
	"github.com/gpudra/gpudra/sharing"
)

// MIGBaselineFile is the file in the state directory that lists the MIG instances that existed,
// unclaimed, when the plugin first started in the current boot. Reconcile never destroys them:
// they were made by someone else (mig-parted, an operator), not leaked by the plugin.
const MIGBaselineFile = "mig-baseline.json"

// ReconcileReport says what Reconcile found and did. Claims are named "namespace/name (uid)".
type ReconcileReport struct {
	// Checkpoint is what opening the checkpoint found (corrupt file moved aside, reboot...).
	Checkpoint CheckpointStatus
	// TempFilesRemoved are leftovers of interrupted CDI spec writes.
	TempFilesRemoved []string
	// RolledBack are claims whose prepare was interrupted (PrepareStarted) and was undone.
	RolledBack []string
	// UnprepareFinished are claims whose unprepare was interrupted and was finished.
	UnprepareFinished []string
	// Forgotten are claims recorded before a reboot, which erased what their prepares did on the
	// node; they are dropped, and kubelet's next prepare of each redoes it from scratch.
	Forgotten []string
	// Unreadable are prepared claims kept as they are because a GPU they use failed to
	// enumerate (gpu.Inventory.Unreadable): an unreadable GPU is not an absent one, so neither
	// the claim nor its spec is dropped; the next start checks them again.
	Unreadable []string
	// SpecsRewritten are prepared claims whose CDI spec was missing (removed by hand, or a
	// crash between writing the entry and the spec) and was written again.
	SpecsRewritten []string
	// SpecsPruned are the UIDs of claims whose CDI spec existed with no checkpoint entry
	// (only when the checkpoint is trusted).
	SpecsPruned []string
	// Adopted are the UIDs of claims rebuilt from their CDI spec and the node because the
	// checkpoint was corrupt or missing; NotAdopted those whose spec names devices that are not
	// on the node any more (their specs are kept, and nothing is destroyed for them).
	Adopted, NotAdopted []string
	// MIGUnowned are instances on GPUs published as partitions that no claim records, kept
	// because the checkpoint cannot be trusted to say they are leaks, as "<GPU UUID>
	// <profile>@<start>". They are added to the baseline and reported until removed by hand.
	MIGUnowned []string
	// MIGDestroyed are MIG instances nobody owned (dynamic MIG only), as "<GPU UUID>
	// <profile>@<start>".
	MIGDestroyed []string
	// MIGBaseline are the unclaimed instances that existed at the first start in this boot and
	// are left alone, in the same form.
	MIGBaseline []string
	// MPSRestarted are the MPS daemons of prepared claims that did not run and were restarted;
	// MPSDirsRemoved the MPS daemon directories of no prepared claim that were removed.
	MPSRestarted, MPSDirsRemoved []string
	// Prepared is the number of claims prepared after reconciliation.
	Prepared int
}

// String summarizes the report on one line.
func (r *ReconcileReport) String() string {
	return fmt.Sprintf("prepared=%d rolledBack=%d unprepareFinished=%d forgotten=%d unreadable=%d adopted=%d notAdopted=%d specsRewritten=%d specsPruned=%d migDestroyed=%d migBaseline=%d migUnowned=%d checkpointCorrupt=%t rebooted=%t",
		r.Prepared, len(r.RolledBack), len(r.UnprepareFinished), len(r.Forgotten), len(r.Unreadable), len(r.Adopted), len(r.NotAdopted), len(r.SpecsRewritten), len(r.SpecsPruned),
		len(r.MIGDestroyed), len(r.MIGBaseline), len(r.MIGUnowned), r.Checkpoint.Corrupt, r.Checkpoint.Rebooted)
}

// Reconcile brings checkpoint, CDI specs and MIG instances back in line after a restart, a
// crash or a reboot. Call it before serving (Start does). It holds the lock of every GPU for its
// whole run, so it never races a prepare or unprepare, of this process or of another plugin
// process on the node (a rolling update), and it works on the checkpoint as it is on disk. In
// order:
//
//  1. temporary files of interrupted spec writes are removed;
//  2. claims recorded in an earlier boot are forgotten (their specs go in step 7): the reboot
//     erased what their prepares did, and kubelet prepares them again;
//  3. when the checkpoint was corrupt or missing, claims whose CDI spec exists are adopted:
//     rebuilt from the spec, their MIG instances and MPS daemons (ReconcileReport.Adopted);
//     the sharing engine's registry is restored from the recorded sharing setups;
//  4. interrupted prepares (PrepareStarted) are rolled back, including host changes that a crash
//     kept from being recorded; interrupted unprepares (UnprepareStarted) are finished;
//  5. prepared claims whose existing (static) MIG device no longer exists — a reboot or an
//     operator changed the MIG layout — are forgotten: a spec written from their recorded ids
//     could grant another instance; devices that still exist get their current ids recorded;
//     a claim on a GPU that failed to enumerate is kept untouched (ReconcileReport.Unreadable):
//     nothing says its device is gone;
//  6. prepared claims whose CDI spec is missing get it written again;
//  7. specs of claims the checkpoint does not hold are removed, when it can be trusted;
//  8. MPS daemons of prepared claims that do not run are restarted, and MPS directories of no
//     prepared claim removed;
//  9. with dynamic MIG, MIG instances on GPUs published as partitions that no claim records and
//     that are not in the first-start baseline (MIGBaselineFile) are destroyed. Every instance
//     the plugin creates is recorded in the checkpoint before it is created, so these can only
//     be leaks of a lost checkpoint; instances made by others before the plugin first ran in
//     this boot are in the baseline and kept. When the checkpoint cannot be trusted, no
//     instance is destroyed: unowned ones join the baseline and are reported.
//
// Reconcile goes on after a failed repair and returns all errors joined with the report.
func (p *Plugin) Reconcile(ctx context.Context) (*ReconcileReport, error) {
	rep := &ReconcileReport{Checkpoint: p.checkpoint}
	steps := []func(context.Context, *ReconcileReport) error{
		p.forgetRebooted, p.adoptOrphans, p.restoreSharing, p.finishInterrupted, p.forgetVanished, p.reconcileSpecs, p.reconcileMPS,
	}
	if p.dynamicMIG() && p.mig != nil {
		steps = append(steps, p.reconcileMIG)
	}
	err := reconcile.Reconcile(ctx, rep, p.lockAll, p.writer, &rep.TempFilesRemoved, steps...)
	p.metrics.countReconciled(rep)
	return rep, err
}

// lockAll takes the locks of every GPU of the node and of every GPU a claim records.
func (p *Plugin) lockAll() (func(), error) {
	if err := p.store.Refresh(); err != nil {
		return nil, err
	}
	var uuids []string
	for _, g := range p.inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	for _, c := range p.store.List() {
		uuids = append(uuids, claimGPUs(c)...)
	}
	return p.lockGPUs(uuids)
}

// forgetRebooted forgets every claim recorded in an earlier boot; a spec that a spec directory
// on disk kept goes with the other orphans in reconcileSpecs. The reboot erased what the
// claim's prepare did on the node (dynamic MIG instances, host settings, MPS daemons, the spec
// on a tmpfs), and kubelet prepares again the claim of every pod it starts after a reboot: it
// does not checkpoint which claims are prepared. Keeping none is what lets an unprepare return
// without an fsync: whatever version of the checkpoint a power loss leaves, no claim of it
// outlives the reboot (docs/reliability.md, "Durability"). A claim with no boot ID (migrated
// from checkpoint version 1, which kept none) is kept: nothing says it predates this boot, and
// an upgrade of the driver does not reboot the node.
func (p *Plugin) forgetRebooted(ctx context.Context, rep *ReconcileReport) error {
	var errs []error
	boot := p.store.BootID()
	for _, c := range p.store.List() {
		if c.BootID == boot || c.BootID == "" {
			continue
		}
		if err := p.store.Delete(c.UID, reconcileDurability); err != nil {
			errs = append(errs, fmt.Errorf("claim %s: %w", claimstate.Ref(c), err))
			continue
		}
		rep.Forgotten = append(rep.Forgotten, claimstate.Ref(c))
		klog.FromContext(ctx).Info("Forgot claim prepared before a reboot; kubelet prepares it again", "claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID)
	}
	return errors.Join(errs...)
}

// restoreSharing rebuilds the sharing engine's registry from the applied records. Every GPU
// lock is held.
func (p *Plugin) restoreSharing(_ context.Context, _ *ReconcileReport) error {
	gen := p.store.Reloads()
	if err := p.sharing.Restore(p.appliedRecords()); err != nil {
		return fmt.Errorf("restore sharing registry: %w", err)
	}
	var all []string
	for _, g := range p.inv.GPUs {
		all = append(all, g.UUID)
	}
	p.markSynced(all, gen)
	return nil
}

// appliedRecords are the sharing records of the claims whose host changes were made.
func (p *Plugin) appliedRecords() []sharing.Record {
	var records []sharing.Record
	for _, c := range p.store.List() {
		if ss, err := sharingOf(c); err == nil && ss != nil && ss.Applied {
			records = append(records, *ss.Record)
		}
	}
	return records
}

// finishInterrupted rolls back interrupted prepares and finishes interrupted unprepares.
func (p *Plugin) finishInterrupted(ctx context.Context, rep *ReconcileReport) error {
	var errs []error
	for _, c := range p.store.List() {
		if c.Phase == checkpoint.PrepareCompleted {
			continue
		}
		cctx := klog.NewContext(ctx, klog.FromContext(ctx).WithValues("claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID))
		switch c.Phase {
		case checkpoint.PrepareStarted:
			if err := p.rollback(cctx, c, true, reconcileDurability); err != nil {
				errs = append(errs, fmt.Errorf("roll back claim %s: %w", claimstate.Ref(c), err))
			} else {
				rep.RolledBack = append(rep.RolledBack, claimstate.Ref(c))
			}
		case checkpoint.UnprepareStarted:
			if err := p.finishUnprepare(cctx, c, reconcileDurability); err != nil {
				errs = append(errs, fmt.Errorf("finish unprepare of claim %s: %w", claimstate.Ref(c), err))
			} else {
				rep.UnprepareFinished = append(rep.UnprepareFinished, claimstate.Ref(c))
			}
		}
	}
	return errors.Join(errs...)
}

// forgetVanished forgets prepared claims whose existing MIG device is gone, and records the
// current ids of those whose device still exists (its instance may have been recreated).
func (p *Plugin) forgetVanished(ctx context.Context, rep *ReconcileReport) error {
	var errs []error
	for _, c := range p.store.List() {
		if c.Phase != checkpoint.PrepareCompleted {
			continue
		}
		updated, gone := p.currentStatic(c)
		switch {
		case gone != "" && p.onUnreadableGPU(c):
			rep.Unreadable = append(rep.Unreadable, claimstate.Ref(c))
			klog.FromContext(ctx).Info("Keeping claim whose GPU could not be read; it is checked again at the next start",
				"claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID, "device", gone)
		case gone != "":
			if err := p.forget(ctx, c); err != nil {
				errs = append(errs, fmt.Errorf("claim %s: %w", claimstate.Ref(c), err))
				continue
			}
			rep.Forgotten = append(rep.Forgotten, claimstate.Ref(c))
			klog.FromContext(ctx).Info("Forgot claim whose MIG device no longer exists; kubelet prepares it again or the pod fails",
				"claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID, "device", gone)
		case updated != nil:
			if err := p.store.Put(*updated, reconcileDurability); err != nil {
				errs = append(errs, fmt.Errorf("claim %s: %w", claimstate.Ref(c), err))
			}
		}
	}
	return errors.Join(errs...)
}

// onUnreadableGPU says whether a device of the claim is on a GPU that may be on the node but
// failed to enumerate.
func (p *Plugin) onUnreadableGPU(c checkpoint.ClaimState) bool {
	return slices.ContainsFunc(claimGPUs(c), p.inv.Unreadable)
}

// currentStatic checks the existing MIG devices (not created by the plugin) of a claim against
// the node: gone names the first device that no longer exists; updated is the claim with the
// devices' current ids when they changed.
func (p *Plugin) currentStatic(c checkpoint.ClaimState) (updated *checkpoint.ClaimState, gone string) {
	changed := false
	for i, d := range c.Devices {
		if d.MIG == nil || d.MIG.Created {
			continue
		}
		pub, ok := p.devices.lookup(d.Device)
		if !ok || pub.MIG == nil || pub.GPU.UUID != d.GPUUUID {
			return nil, d.Device
		}
		m := pub.MIG
		if d.MIG.GIID != m.GIID || d.MIG.CIID != m.CIID || d.MIG.UUID != m.UUID {
			c.Devices[i].MIG.GIID, c.Devices[i].MIG.CIID, c.Devices[i].MIG.UUID = m.GIID, m.CIID, m.UUID
			changed = true
		}
	}
	if changed {
		return &c, ""
	}
	return nil, ""
}

// forget drops a prepared claim whose devices are gone: its spec, its host changes and its
// entry. Nothing it records is destroyed: its instances no longer exist.
func (p *Plugin) forget(ctx context.Context, c checkpoint.ClaimState) error {
	if err := p.writer.Remove(c.UID); err != nil {
		return fmt.Errorf("remove CDI spec: %w", err)
	}
	if ss, err := sharingOf(c); err == nil && ss != nil && ss.Applied && c.BootID == p.store.BootID() {
		if err := p.sharing.Undo(ctx, ss.Record); err != nil {
			return fmt.Errorf("undo sharing: %w", err)
		}
	}
	return p.store.Delete(c.UID, reconcileDurability)
}

// reconcileSpecs writes the missing specs of prepared claims and removes the specs of claims
// the checkpoint does not hold, when it is trusted. A spec that exists was written in this boot
// (forgetRebooted dropped the claims of earlier ones) and atomically, so it is kept as it is.
func (p *Plugin) reconcileSpecs(ctx context.Context, rep *ReconcileReport) error {
	done, err := reconcile.ReconcileSpecs(ctx, p.store, p.writer, p.trusted(), p.rewriteSpec)
	rep.Prepared, rep.SpecsRewritten, rep.SpecsPruned = done.Prepared, done.Rewritten, done.Pruned
	return err
}

// reconcileMPS restarts the MPS daemons of prepared claims that died (with the plugin's
// container, say) and removes the MPS directories of claims no longer prepared.
func (p *Plugin) reconcileMPS(ctx context.Context, rep *ReconcileReport) error {
	restarted, err := p.sharing.SuperviseMPSDaemons(ctx)
	rep.MPSRestarted = restarted
	cleaned, cerr := p.sharing.CleanMPSDirs(ctx)
	rep.MPSDirsRemoved = cleaned.Removed
	return errors.Join(err, cerr)
}

// rewriteSpec writes the CDI spec of a prepared claim again from its checkpoint entry. The
// device IDs must come out as recorded, since the kubelet already has them.
func (p *Plugin) rewriteSpec(c checkpoint.ClaimState) error {
	if anyVFIO(c) {
		spec, err := vfioSpec(p.gen.Kind(), c)
		if err == nil {
			_, err = p.writer.Write(spec)
		}
		return err
	}
	ss, err := sharingOf(c)
	if err != nil {
		return err
	}
	var rec *sharing.Record
	if ss != nil && ss.Applied {
		rec = ss.Record
	}
	cds := cdi.ClaimDevices{ClaimUID: c.UID}
	for _, d := range c.Devices {
		g, ok := p.devices.gpus[d.GPUUUID]
		if pub, published := p.devices.lookup(d.Device); !ok && d.GPUUUID == "" && published {
			g, ok = pub.GPU, true // migrated from checkpoint version 1, which kept names only
		}
		if !ok {
			return fmt.Errorf("device %s: GPU %s is not on this node", d.Device, d.GPUUUID)
		}
		cd := cdi.Device{Name: d.Device, GPUMinor: g.Minor, UUID: g.UUID, Edits: editsFor(rec, d)}
		if d.MIG != nil {
			cd.MIG, cd.UUID = &cdi.MIGInstanceIDs{GI: d.MIG.GIID, CI: d.MIG.CIID}, d.MIG.UUID
		}
		cds.Devices = append(cds.Devices, cd)
	}
	spec, err := p.gen.Generate(cds)
	if err != nil {
		return err
	}
	for _, d := range c.Devices {
		if len(d.CDIDeviceIDs) > 0 && spec.DeviceIDs[d.Device] != d.CDIDeviceIDs[0] {
			return fmt.Errorf("device %s: CDI device ID would change from %s to %s", d.Device, d.CDIDeviceIDs[0], spec.DeviceIDs[d.Device])
		}
	}
	_, err = p.writer.Write(spec)
	return err
}

type migBaseline struct {
	BootID    string            `json:"bootID"`
	Instances []migBaselineItem `json:"instances"`
	// GPUs are the GPUs whose instances Instances covers: a GPU whose instances could not be
	// listed when the baseline was taken (an NVML error, a GPU not partitioned or not enumerated
	// then) gets its baseline at a later start. A baseline written before this field (nil)
	// covers every GPU.
	GPUs []string `json:"gpus"`
}

// covers says whether the baseline holds the instances the GPU had before the plugin ran.
func (b *migBaseline) covers(gpuUUID string) bool {
	return b.GPUs == nil || slices.Contains(b.GPUs, gpuUUID)
}

type migBaselineItem struct {
	GPUUUID     string `json:"gpuUUID"`
	GIProfileID int    `json:"giProfileID"`
	Start       int    `json:"start"`
}

func instanceName(gpuUUID, profile string, start int) string {
	return fmt.Sprintf("%s %s@%d", gpuUUID, profile, start)
}

// reconcileMIG destroys MIG instances that no claim records and that are not in the baseline.
func (p *Plugin) reconcileMIG(ctx context.Context, rep *ReconcileReport) error {
	// The baseline is written only here, under every GPU lock: its temporaries are leftovers.
	if _, err := atomicfile.Clean(p.stateDir, MIGBaselineFile); err != nil {
		klog.FromContext(ctx).Error(err, "Removing leftovers of an interrupted MIG baseline write failed")
	}
	base, fresh, err := p.loadBaseline()
	if err != nil {
		return err
	}
	r := &migReconciler{p: p, ctx: ctx, rep: rep, base: &base, fresh: fresh,
		inBase: map[migBaselineItem]bool{}, referenced: p.referencedPlacements()}
	for _, it := range base.Instances {
		r.inBase[it] = true
	}
	for _, g := range p.inv.GPUs {
		if !p.devices.partitioned[g.UUID] {
			continue // published statically: its instances are not ours
		}
		r.gpu(g.UUID)
	}
	if r.changed || fresh {
		r.errs = append(r.errs, p.saveBaseline(base))
	}
	return errors.Join(r.errs...)
}

// migReconciler is one pass of reconcileMIG over the partitioned GPUs.
type migReconciler struct {
	p          *Plugin
	ctx        context.Context
	rep        *ReconcileReport
	base       *migBaseline
	fresh      bool // no baseline of this boot yet
	inBase     map[migBaselineItem]bool
	referenced map[placementKey]bool
	changed    bool // base needs saving
	errs       []error
}

// gpu reconciles the MIG instances of one GPU. A GPU the baseline does not cover yet takes its
// instances into the baseline.
func (r *migReconciler) gpu(gpuUUID string) {
	insts, err := r.p.mig.Instances(r.ctx, gpuUUID)
	if err != nil {
		// Not covered: the next start takes this GPU's baseline.
		r.errs = append(r.errs, fmt.Errorf("list MIG instances of GPU %s: %w", gpuUUID, err))
		return
	}
	gpuFresh := r.fresh || !r.base.covers(gpuUUID)
	if gpuFresh && r.base.GPUs != nil && !r.base.covers(gpuUUID) {
		r.base.GPUs, r.changed = append(r.base.GPUs, gpuUUID), true
	}
	for _, in := range insts {
		if !r.referenced[placementKey{gpuUUID, in.Placement.Start}] {
			r.unreferenced(gpuUUID, gpuFresh, in)
		}
	}
}

// unreferenced handles an instance no claim records: kept when it is in the baseline, taken
// into it when the GPU is fresh or the checkpoint is not trusted, destroyed otherwise.
func (r *migReconciler) unreferenced(gpuUUID string, gpuFresh bool, in MIGInstance) {
	logger := klog.FromContext(r.ctx)
	item := migBaselineItem{GPUUUID: gpuUUID, GIProfileID: in.GIProfileID, Start: in.Placement.Start}
	name := instanceName(gpuUUID, in.Profile, in.Placement.Start)
	if gpuFresh || r.inBase[item] {
		r.rep.MIGBaseline = append(r.rep.MIGBaseline, name)
	}
	if (gpuFresh || !r.p.trusted()) && !r.inBase[item] {
		r.base.Instances = append(r.base.Instances, item)
		r.inBase[item], r.changed = true, true
		if !gpuFresh {
			r.rep.MIGUnowned = append(r.rep.MIGUnowned, name)
			logger.Info("Keeping a MIG instance no claim records: the checkpoint was lost, so it may be in use; remove it by hand if it is not",
				"gpu", gpuUUID, "profile", in.Profile, "placement", in.Placement.Start)
		}
	}
	if r.inBase[item] {
		return
	}
	if err := r.p.mig.Destroy(r.ctx, gpuUUID, in.Profile, in.Placement); err != nil {
		r.errs = append(r.errs, fmt.Errorf("destroy unowned MIG instance %s: %w", name, err))
		return
	}
	r.rep.MIGDestroyed = append(r.rep.MIGDestroyed, name)
	logger.Info("Destroyed MIG instance no claim owns", "gpu", gpuUUID, "profile", in.Profile, "placement", in.Placement.Start)
}

type placementKey struct {
	gpu   string
	start int
}

// referencedPlacements are the MIG placements some claim records.
func (p *Plugin) referencedPlacements() map[placementKey]bool {
	referenced := map[placementKey]bool{}
	for _, c := range p.store.List() {
		for _, d := range c.Devices {
			if d.MIG != nil {
				referenced[placementKey{d.MIG.ParentUUID, d.MIG.Placement.Start}] = true
			}
		}
	}
	return referenced
}

// loadBaseline reads the baseline of this boot; fresh says there is none yet.
func (p *Plugin) loadBaseline() (base migBaseline, fresh bool, err error) {
	path := filepath.Join(p.stateDir, MIGBaselineFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if json.Unmarshal(b, &base) == nil && base.BootID == p.store.BootID() {
			return base, false, nil
		}
	case !errors.Is(err, os.ErrNotExist):
		return base, false, fmt.Errorf("read %s: %w", path, err)
	}
	return migBaseline{BootID: p.store.BootID(), GPUs: []string{}}, true, nil
}

func (p *Plugin) saveBaseline(base migBaseline) error {
	path := filepath.Join(p.stateDir, MIGBaselineFile)
	b, err := json.Marshal(base)
	if err == nil {
		err = p.files.Write(path, b, checkpoint.FileMode, baselineDurability)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
