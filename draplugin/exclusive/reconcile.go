package exclusive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/claimstate"
	"github.com/gpudra/gpudra/internal/durability"
	"github.com/gpudra/gpudra/internal/reconcile"
)

// ReconcileReport says what Reconcile found and did. Claims are named "namespace/name (uid)";
// adopted ones, whose names are unknown, by UID.
type ReconcileReport struct {
	// Checkpoint is what opening the checkpoint found.
	Checkpoint CheckpointStatus
	// TempFilesRemoved are leftovers of interrupted CDI spec writes.
	TempFilesRemoved []string
	// RolledBack are claims whose prepare was interrupted and was undone; UnprepareFinished
	// those whose unprepare was interrupted and was finished.
	RolledBack, UnprepareFinished []string
	// Released are claims prepared in an earlier boot: they were unprepared, and kubelet, which
	// prepares again the claims of the pods it starts after a reboot, gets them prepared afresh.
	Released []string
	// Adopted are the UIDs of claims rebuilt from their CDI spec because the checkpoint was
	// missing or corrupt; NotAdopted those whose spec names a device the driver does not list
	// (their specs are kept: nothing is removed for lack of a record).
	Adopted, NotAdopted []string
	// SpecsRewritten are prepared claims whose CDI spec was missing and was written again from
	// the recorded container edits; SpecsPruned the UIDs of specs of claims a trusted checkpoint
	// does not hold, which were removed.
	SpecsRewritten, SpecsPruned []string
	// Prepared is the number of claims prepared after reconciliation.
	Prepared int
}

// String summarizes the report on one line.
func (r *ReconcileReport) String() string {
	return fmt.Sprintf("prepared=%d rolledBack=%d unprepareFinished=%d released=%d adopted=%d notAdopted=%d specsRewritten=%d specsPruned=%d checkpointFresh=%t checkpointCorrupt=%t rebooted=%t",
		r.Prepared, len(r.RolledBack), len(r.UnprepareFinished), len(r.Released), len(r.Adopted), len(r.NotAdopted),
		len(r.SpecsRewritten), len(r.SpecsPruned), r.Checkpoint.Fresh, r.Checkpoint.Corrupt, r.Checkpoint.Rebooted)
}

// Reconcile brings the checkpoint, the CDI specs and the driver's devices back in line after a
// restart, a crash or a reboot. Call it before serving (Start does). It holds the lock of every
// device for its whole run, so it never races a prepare or unprepare of this or another plugin
// process on the node. In order:
//
//  1. temporary files of interrupted spec writes are removed;
//  2. when the checkpoint was missing or corrupt, claims whose CDI spec exists are adopted,
//     rebuilt from the spec (their namespace, name and request names are filled in when kubelet
//     prepares them again), so that kubelet's unprepare releases their devices;
//  3. interrupted prepares are undone and interrupted unprepares finished; claims prepared in
//     an earlier boot are unprepared (Driver.Unprepare for each device), since kubelet prepares
//     them again;
//  4. prepared claims whose CDI spec is missing get it written again, with the recorded IDs;
//  5. specs of claims the checkpoint does not hold are removed, when it can be trusted.
//
// Reconcile goes on after a failed repair and returns all errors joined with the report.
func (p *Plugin) Reconcile(ctx context.Context) (*ReconcileReport, error) {
	rep := &ReconcileReport{Checkpoint: p.checkpoint}
	return rep, reconcile.Reconcile(ctx, rep, p.lockAll, p.writer, &rep.TempFilesRemoved, p.adoptOrphans, p.finishClaims, p.reconcileSpecs)
}

// trusted says whether the checkpoint can be believed about what is NOT prepared.
func (p *Plugin) trusted() bool { return !p.checkpoint.Fresh && !p.checkpoint.Corrupt }

// lockAll takes the locks of every device the driver lists and every device a claim records.
func (p *Plugin) lockAll() (func(), error) {
	if err := p.store.Refresh(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	var devices []string
	for name := range p.published {
		devices = append(devices, name)
	}
	p.mu.Unlock()
	for _, c := range p.store.List() {
		devices = append(devices, deviceNames(c)...)
	}
	return p.lock(devices)
}

// adoptOrphans rebuilds, when the checkpoint cannot be trusted, the entries of the claims whose
// CDI spec exists without one.
func (p *Plugin) adoptOrphans(ctx context.Context, rep *ReconcileReport) error {
	if p.trusted() {
		return nil
	}
	done, err := reconcile.AdoptOrphans(ctx, p.store, p.writer, p.adopt)
	rep.Adopted, rep.NotAdopted = done.Adopted, done.NotAdopted
	return err
}

// adopt builds the recovered entry of the claim of one CDI spec: its devices and their edits.
func (p *Plugin) adopt(uid string) (checkpoint.ClaimState, error) {
	st := checkpoint.ClaimState{UID: uid, Phase: checkpoint.PrepareCompleted, Recovered: true}
	spec, err := p.writer.Read(uid)
	if err != nil {
		return st, err
	}
	for _, sd := range spec.Devices {
		name, ok := strings.CutPrefix(sd.Name, uid+"-")
		if !ok || !p.isPublished(name) {
			return st, fmt.Errorf("spec device %q is not <claim UID>-<device> of a device the driver lists on node %s", sd.Name, p.nodeName)
		}
		edits, err := json.Marshal(sd.ContainerEdits)
		if err != nil {
			return st, err
		}
		st.Devices = append(st.Devices, checkpoint.PreparedDevice{Pool: p.nodeName, Device: name, Edits: edits,
			CDIDeviceIDs: []string{p.writer.Kind() + "=" + sd.Name}})
	}
	return st, nil
}

// finishClaims undoes interrupted prepares, finishes interrupted unprepares and unprepares the
// claims of an earlier boot.
func (p *Plugin) finishClaims(ctx context.Context, rep *ReconcileReport) error {
	var errs []error
	boot := p.store.BootID()
	for _, c := range p.store.List() {
		var done *[]string
		switch {
		case c.Phase == checkpoint.PrepareStarted:
			done = &rep.RolledBack
		case c.Phase == checkpoint.UnprepareStarted:
			done = &rep.UnprepareFinished
		case c.BootID != boot && c.BootID != "": // none: migrated from version 1, boot unknown
			done = &rep.Released
		default:
			continue
		}
		cctx := klog.NewContext(ctx, klog.FromContext(ctx).WithValues("claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID))
		if err := p.release(cctx, c, durability.ReconcileDurability); err != nil {
			errs = append(errs, fmt.Errorf("claim %s (%s): %w", claimstate.Ref(c), c.Phase, err))
			continue
		}
		*done = append(*done, claimstate.Ref(c))
	}
	return errors.Join(errs...)
}

// reconcileSpecs writes the missing specs of prepared claims again from their recorded
// container edits, and removes the specs of claims the checkpoint does not hold, when it is
// trusted. A spec that exists was written in this boot (claims of earlier boots are released)
// and atomically, so it is kept as it is.
func (p *Plugin) reconcileSpecs(ctx context.Context, rep *ReconcileReport) error {
	done, err := reconcile.ReconcileSpecs(ctx, p.store, p.writer, p.trusted(),
		func(c checkpoint.ClaimState) error { return p.writeSpec(&c) })
	rep.Prepared, rep.SpecsRewritten, rep.SpecsPruned = done.Prepared, done.Rewritten, done.Pruned
	return err
}
