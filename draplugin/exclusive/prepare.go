package exclusive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/claimstate"
	"github.com/gpudra/gpudra/internal/crashpoint"
	"github.com/gpudra/gpudra/internal/durability"
	"github.com/gpudra/gpudra/internal/serving"
)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. Claims are prepared concurrently,
// each with its own result. Preparing a claim:
//
//  1. records its devices in the checkpoint (PrepareStarted) before anything is done;
//  2. calls Driver.Prepare for each device and records the container edits it returns;
//  3. writes the claim's CDI spec, one CDI device per device;
//  4. records the claim as PrepareCompleted and answers with the CDI device IDs.
//
// A failing step undoes the attempt (spec removed, Driver.Unprepare for every device, entry
// deleted). A claim already prepared is answered from the checkpoint, unless its allocation
// changed, which is an error.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	defer p.ops.Begin()()
	return serving.Concurrently(claims, func(c *resourceapi.ResourceClaim) types.UID { return c.UID },
		func(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
			logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(c), "claimUID", c.UID)
			devices, err := p.prepare(klog.NewContext(ctx, logger), c)
			if err != nil {
				err = fmt.Errorf("prepare claim %s: %w", claimstate.ClaimRef(c.Namespace, c.Name, c.UID), err)
				logger.Error(err, "Prepare failed")
				return kubeletplugin.PrepareResult{Err: err}
			}
			logger.V(2).Info("Prepared claim", "devices", len(devices))
			return kubeletplugin.PrepareResult{Devices: devices}
		}), nil
}

func (p *Plugin) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	uid := string(claim.UID)
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return nil, err
	}
	results, err := p.ourResults(claim)
	if err != nil || len(results) == 0 {
		return nil, err
	}
	devices := make([]string, 0, len(results))
	for _, r := range results {
		devices = append(devices, r.Device)
	}
	// An earlier attempt may have recorded other devices (a claim allocated again without being
	// unprepared): undoing it needs their locks too.
	if err := p.store.Refresh(); err != nil {
		return nil, err
	}
	if st, ok := p.store.Get(uid); ok {
		devices = append(devices, deviceNames(st)...)
	}
	unlock, err := p.lock(devices)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Kubelet may have given up on this call while it waited for the locks, and unprepared the
	// claim: going on would leave a claim nobody unprepares.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("gave up while waiting for the device locks: %w", context.Cause(ctx))
	}
	if st, ok := p.store.Get(uid); ok {
		answer, err := p.resume(ctx, claim, results, st)
		if err != nil || answer != nil {
			return p.result(claim, answer), err
		}
	}
	return p.prepareLocked(ctx, claim, results)
}

// result is the answer to kubelet for a prepared claim's entry; nil for none.
func (p *Plugin) result(claim *resourceapi.ResourceClaim, st *checkpoint.ClaimState) []kubeletplugin.Device {
	if st == nil {
		return nil
	}
	return claimstate.Result(*st, claimstate.ShareIDs(claim, p.driverName))
}

// resume handles a claim the checkpoint holds: a prepared claim is answered from its entry
// (answer), unless it is now allocated other devices; an interrupted prepare or unprepare is
// undone, so that prepare starts afresh (no answer).
func (p *Plugin) resume(ctx context.Context, claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult, st checkpoint.ClaimState) (*checkpoint.ClaimState, error) {
	switch {
	case st.Phase == checkpoint.PrepareCompleted && st.Recovered:
		st, err := claimstate.CompleteRecovered(st, claim, results)
		if err != nil {
			return nil, err
		}
		if err := p.store.Put(st, durability.StepDurability); err != nil {
			return nil, fmt.Errorf("record the recovered claim: %w", err)
		}
		klog.FromContext(ctx).Info("Claim recovered from its CDI spec is prepared again; its record is complete now")
		return &st, nil
	case st.Phase == checkpoint.PrepareCompleted:
		if err := claimstate.SameAllocation(st, results); err != nil {
			return nil, err
		}
		klog.FromContext(ctx).V(3).Info("Claim already prepared, returning the recorded devices")
		return &st, nil
	}
	if err := p.release(ctx, st, durability.StepDurability); err != nil {
		return nil, fmt.Errorf("undo the claim's interrupted %s: %w", st.Phase, err)
	}
	return nil, nil
}

// prepareLocked prepares a claim the checkpoint does not hold, with its devices' locks held.
// Once its devices are recorded, a failure undoes the attempt.
func (p *Plugin) prepareLocked(ctx context.Context, claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult) (_ []kubeletplugin.Device, err error) {
	st := checkpoint.ClaimState{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, Phase: checkpoint.PrepareStarted}
	for _, r := range results {
		st.Devices = append(st.Devices, checkpoint.PreparedDevice{Request: r.Request, Pool: r.Pool, Device: r.Device})
	}
	if err := p.store.Put(st, durability.StepDurability); err != nil {
		return nil, fmt.Errorf("record PrepareStarted: %w", err)
	}
	if err := p.crashPoint(testhooks.CrashAfterPrepareStarted, st.UID); err != nil {
		return nil, err
	}
	defer func() {
		if err == nil || crashpoint.IsCrash(err) {
			return
		}
		if rerr := p.release(context.WithoutCancel(ctx), st, durability.StepDurability); rerr != nil {
			err = fmt.Errorf("%w; undoing the attempt failed too, so the claim stays recorded and is undone by the next prepare, unprepare or start: %w", err, rerr)
		}
	}()
	for i := range st.Devices {
		if err := p.prepareDevice(ctx, claim, &st.Devices[i]); err != nil {
			return nil, err
		}
		if err := p.crashPoint(testhooks.CrashAfterDevicePrepared, st.UID); err != nil {
			return nil, err
		}
	}
	if err := p.writeSpec(&st); err != nil {
		return nil, err
	}
	if err := p.crashPoint(testhooks.CrashAfterCDIWritten, st.UID); err != nil {
		return nil, err
	}
	st.Phase = checkpoint.PrepareCompleted
	if err := p.store.Put(st, durability.StepDurability); err != nil {
		return nil, fmt.Errorf("record PrepareCompleted: %w", err)
	}
	if err := p.crashPoint(testhooks.CrashAfterPrepareCompleted, st.UID); err != nil {
		return nil, err
	}
	return p.result(claim, &st), nil
}

// prepareDevice has the driver prepare one device and records the container edits it returns.
func (p *Plugin) prepareDevice(ctx context.Context, claim *resourceapi.ResourceClaim, d *checkpoint.PreparedDevice) error {
	edits, err := p.driver.Prepare(ctx, claim, d.Device)
	if err != nil {
		return fmt.Errorf("device %s: prepare: %w", d.Device, err)
	}
	raw, err := json.Marshal(edits)
	if err != nil {
		return fmt.Errorf("device %s: encode its container edits: %w", d.Device, err)
	}
	d.Edits = raw
	return nil
}

// writeSpec writes the claim's CDI spec from the container edits its entry records and records
// each device's CDI device ID there. An ID recorded before must come out the same: kubelet has
// it.
func (p *Plugin) writeSpec(st *checkpoint.ClaimState) error {
	devs := make([]cdi.DeviceEdits, 0, len(st.Devices))
	for _, d := range st.Devices {
		var e specs.ContainerEdits
		if err := json.Unmarshal(d.Edits, &e); err != nil {
			return fmt.Errorf("device %s: recorded container edits: %w", d.Device, err)
		}
		devs = append(devs, cdi.DeviceEdits{Name: d.Device, Edits: e})
	}
	cs, err := cdi.NewClaimSpec(p.writer.Kind(), st.UID, specs.ContainerEdits{}, devs)
	if err != nil {
		return fmt.Errorf("generate CDI spec: %w", err)
	}
	for i := range st.Devices {
		d, id := &st.Devices[i], cs.DeviceIDs[st.Devices[i].Device]
		if len(d.CDIDeviceIDs) > 0 && d.CDIDeviceIDs[0] != id {
			return fmt.Errorf("device %s: its CDI device ID would change from %s to %s", d.Device, d.CDIDeviceIDs[0], id)
		}
		d.CDIDeviceIDs = []string{id}
	}
	if _, err := p.writer.Write(cs); err != nil {
		return fmt.Errorf("write CDI spec: %w", err)
	}
	return nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Unprepare records the claim as
// UnprepareStarted, removes its CDI spec, calls Driver.Unprepare for its devices and forgets it.
// Unknown claims succeed (once a spec left for them is removed). Nothing is fsynced: Reconcile
// releases every claim of an earlier boot, so a power loss that reverts the checkpoint to
// before an unprepare revives nothing.
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	defer p.ops.Begin()()
	results := serving.Concurrently(claims, func(c kubeletplugin.NamespacedObject) types.UID { return c.UID },
		func(c kubeletplugin.NamespacedObject) error {
			logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID)
			if err := p.unprepare(klog.NewContext(ctx, logger), c); err != nil {
				err = fmt.Errorf("unprepare claim %s: %w", claimstate.ClaimRef(c.Namespace, c.Name, c.UID), err)
				logger.Error(err, "Unprepare failed")
				return err
			}
			logger.V(2).Info("Unprepared claim")
			return nil
		})
	return results, nil
}

func (p *Plugin) unprepare(ctx context.Context, claim kubeletplugin.NamespacedObject) error {
	uid := string(claim.UID)
	if err := cdi.ValidateClaimUID(uid); err != nil {
		return err
	}
	// Another plugin process (a rolling update) may have prepared it: look it up on disk.
	if err := p.store.Refresh(); err != nil {
		return err
	}
	st, ok := p.store.Get(uid)
	lock := func() (func(), error) { return p.lock(deviceNames(st)) }
	if !ok {
		// Not recorded: a prepare of the claim may still wait for its devices' locks, which are
		// not known here. With every lock held, none is under way and one still waiting finds
		// its call over.
		lock = p.lockAll
	}
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	if st, ok = p.store.Get(uid); !ok {
		return p.writer.Remove(uid)
	}
	if st.Phase == checkpoint.PrepareCompleted {
		st.Phase = checkpoint.UnprepareStarted
		if err := p.store.Put(st, durability.StepDurability); err != nil {
			return fmt.Errorf("record UnprepareStarted: %w", err)
		}
		if err := p.crashPoint(testhooks.CrashAfterUnprepareStarted, uid); err != nil {
			return err
		}
	}
	return p.release(ctx, st, durability.StepDurability)
}

// release undoes what is recorded of a claim and forgets it with durability d: the CDI spec is
// removed first (no new container gets the devices), then Driver.Unprepare is called for each
// device, last first. Every step runs even when one fails; the claim then stays recorded, and
// the next unprepare, prepare or start tries again.
func (p *Plugin) release(ctx context.Context, st checkpoint.ClaimState, d atomicfile.Durability) error {
	var errs []error
	if err := p.writer.Remove(st.UID); err != nil {
		errs = append(errs, err)
	} else if err := p.crashPoint(testhooks.CrashAfterCDIRemoved, st.UID); err != nil {
		return err
	}
	for _, dev := range slices.Backward(st.Devices) {
		if err := p.driver.Unprepare(ctx, types.UID(st.UID), dev.Device); err != nil {
			errs = append(errs, fmt.Errorf("device %s: unprepare: %w", dev.Device, err))
			continue
		}
		if err := p.crashPoint(testhooks.CrashAfterDeviceUnprepared, st.UID); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := p.store.Delete(st.UID, d); err != nil {
		return fmt.Errorf("forget the claim: %w", err)
	}
	return p.crashPoint(testhooks.CrashAfterUnprepareCompleted, st.UID)
}

// deviceNames are the devices a claim's entry records.
func deviceNames(st checkpoint.ClaimState) []string {
	out := make([]string, 0, len(st.Devices))
	for _, d := range st.Devices {
		out = append(out, d.Device)
	}
	return out
}
