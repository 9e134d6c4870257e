package draplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metaapply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/sharing"
)

// DeviceStatusData is what the plugin writes into status.devices[].data of a claim it
// prepared, one entry per device, so that `kubectl get resourceclaim -o yaml` says which
// hardware a pod got.
type DeviceStatusData struct {
	// UUID is the GPU UUID, or the MIG device UUID ("MIG-...") for a MIG device.
	UUID string `json:"uuid,omitempty"`
	// ParentUUID is the physical GPU of a MIG device.
	ParentUUID string `json:"parentUUID,omitempty"`
	// MIGProfile is the MIG profile of a MIG device ("1g.5gb").
	MIGProfile string `json:"migProfile,omitempty"`
	// CDIDeviceIDs are the CDI devices the container runtime injected.
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// Sharing is the sharing strategy applied: Exclusive, TimeSlicing or MPS.
	Sharing string `json:"sharing"`
	// AdminAccess is set for a device prepared for admin access (nothing was configured).
	AdminAccess bool `json:"adminAccess,omitempty"`
}

// ConditionPrepared is the condition type of status.devices[] entries: True once the device
// is prepared on the node.
const ConditionPrepared = "Prepared"

// statusAttempts is how often writing one claim's device status is tried before it is given
// up (logged); a later prepare or unprepare of the claim writes it again.
const statusAttempts = 5

// Status writes give way to kubelet's calls: each waits until no prepare or unprepare has been
// queued for statusQuiet, but no longer than statusMaxDelay after it was queued. A server-side
// apply costs the API server about as much as the claim GET of a prepare, so a burst of prepares
// (a node starting many pods) would otherwise wait for the writes of the ones before it; a
// prepare and unprepare of one claim within the wait also become one write.
const (
	statusQuiet    = 25 * time.Millisecond
	statusMaxDelay = 2 * time.Second
)

// statusWriter writes claims' status.devices in the background with server-side apply under
// the driver's field manager, so that prepare does not wait for the API server. The latest
// request for a claim wins: an unprepare queued behind its prepare removes the entries.
type statusWriter struct {
	client  kubernetes.Interface
	manager string
	now     func() time.Time // for the conditions' times
	// quiet and maxDelay are statusQuiet and statusMaxDelay (tests shorten or lengthen them).
	quiet, maxDelay time.Duration

	mu         sync.Mutex
	pending    map[types.UID]statusJob
	lastQueued time.Time // wall clock, monotonic: when the plugin last queued a job
	wake       chan struct{}
}

// statusJob is the status to apply to one claim; devices nil removes the driver's entries.
type statusJob struct {
	namespace, name string
	uid             types.UID
	devices         []*resourceapply.AllocatedDeviceStatusApplyConfiguration
	attempts        int
	queued          time.Time // when the claim's first pending job was queued
}

func newStatusWriter(client kubernetes.Interface, driverName string, now func() time.Time) *statusWriter {
	return &statusWriter{client: client, manager: driverName, now: now, quiet: statusQuiet, maxDelay: statusMaxDelay,
		pending: map[types.UID]statusJob{}, wake: make(chan struct{}, 1)}
}

// prepared queues the device status of a prepared claim.
func (w *statusWriter) prepared(st checkpoint.ClaimState, shareIDs map[string]*types.UID) error {
	devices, err := w.entries(st, shareIDs)
	if err != nil {
		return err
	}
	w.queue(statusJob{namespace: st.Namespace, name: st.Name, uid: types.UID(st.UID), devices: devices})
	return nil
}

// resync queues the device status of every prepared claim: writes still queued when an earlier
// plugin process stopped or was killed are made again (server-side apply of the same entries
// changes nothing where they were written).
func (w *statusWriter) resync(claims []checkpoint.ClaimState) {
	for _, st := range claims {
		if st.Phase != checkpoint.PrepareCompleted || len(st.Devices) == 0 {
			continue
		}
		if err := w.prepared(st, nil); err != nil {
			// Only an undecodable sharing record fails here; the claim's prepare reported it.
			continue
		}
	}
}

// unprepared queues the removal of the driver's entries from an unprepared claim.
func (w *statusWriter) unprepared(namespace, name string, uid types.UID) {
	w.queue(statusJob{namespace: namespace, name: name, uid: uid})
}

func (w *statusWriter) queue(j statusJob) {
	w.mu.Lock()
	w.lastQueued = time.Now()
	j.queued = w.lastQueued
	if old, ok := w.pending[j.uid]; ok {
		j.queued = old.queued
	}
	w.pending[j.uid] = j
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// entries describes each device of a prepared claim.
func (w *statusWriter) entries(st checkpoint.ClaimState, shareIDs map[string]*types.UID) ([]*resourceapply.AllocatedDeviceStatusApplyConfiguration, error) {
	s, err := sharingOf(st)
	if err != nil {
		return nil, err
	}
	var rec *sharing.Record
	if s != nil {
		rec = s.Record
	}
	// The condition changed when the claim was completed, not when its status is (re)written.
	at := st.UpdatedAt
	if at.IsZero() {
		at = w.now()
	}
	now := metav1.NewTime(at.Truncate(time.Second))
	out := make([]*resourceapply.AllocatedDeviceStatusApplyConfiguration, 0, len(st.Devices))
	for i, d := range st.Devices {
		data := DeviceStatusData{UUID: d.GPUUUID, CDIDeviceIDs: d.CDIDeviceIDs, AdminAccess: d.AdminAccess}
		if rec != nil && i < len(rec.Devices) {
			data.Sharing = string(rec.Devices[i].Strategy)
		}
		if d.MIG != nil {
			data.UUID, data.ParentUUID, data.MIGProfile = d.MIG.UUID, d.MIG.ParentUUID, d.MIG.Profile
		}
		raw, err := json.Marshal(data)
		if err != nil {
			return nil, fmt.Errorf("device status of %s: %w", d.Device, err)
		}
		e := resourceapply.AllocatedDeviceStatus().WithDriver(w.manager).WithPool(d.Pool).WithDevice(d.Device).
			WithData(runtime.RawExtension{Raw: raw}).
			WithConditions(preparedCondition(now))
		if id := shareIDs[d.Request+"\x00"+d.Device]; id != nil {
			e.WithShareID(string(*id))
		} else if rec != nil && i < len(rec.Devices) && rec.Devices[i].ShareID != "" {
			e.WithShareID(rec.Devices[i].ShareID)
		}
		out = append(out, e)
	}
	return out, nil
}

// run applies queued statuses until ctx ends or stopped is closed; failed applies are retried
// with backoff, up to statusAttempts per claim.
func (w *statusWriter) run(ctx context.Context, stopped <-chan struct{}) {
	logger := klog.FromContext(ctx).WithName("device-status")
	backoff := newBackoff(100*time.Millisecond, 10*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-stopped:
			return
		case <-w.wake:
		}
		failed := map[types.UID]statusJob{}
		for {
			if !w.waitQuiet(ctx, stopped) {
				return
			}
			j, ok := w.next()
			if !ok {
				break
			}
			// A newer request for the claim (kubelet unprepared it while the prepare's write
			// failed) supersedes the failed one: putting that back would undo the newer write.
			delete(failed, j.uid)
			if err := w.apply(ctx, j); err != nil && w.retryable(logger, &j, err) {
				failed[j.uid] = j
			}
		}
		if len(failed) > 0 {
			w.putBack(slices.Collect(maps.Values(failed)))
			backoff.sleep(ctx)
		} else {
			backoff.reset()
		}
	}
}

// retryable logs a failed write and says whether to try j again (its attempts counted).
func (w *statusWriter) retryable(logger klog.Logger, j *statusJob, err error) bool {
	if apierrors.IsInvalid(err) {
		// Retrying the same status cannot help; say so loudly.
		logger.Error(err, "The API server refused the claim's device status", "claim", klog.KRef(j.namespace, j.name))
		return false
	}
	j.attempts++
	if j.attempts >= statusAttempts {
		logger.Error(err, "Giving up writing the claim's device status", "claim", klog.KRef(j.namespace, j.name), "attempts", j.attempts)
		return false
	}
	logger.V(2).Info("Writing the claim's device status failed; retrying", "claim", klog.KRef(j.namespace, j.name), "err", err)
	return true
}

// waitQuiet waits until the plugin has queued nothing for w.quiet, or the oldest pending job
// has waited w.maxDelay, or nothing is pending; false when ctx ended or the plugin stopped
// meanwhile.
func (w *statusWriter) waitQuiet(ctx context.Context, stopped <-chan struct{}) bool {
	for {
		w.mu.Lock()
		wait := w.quiet - time.Since(w.lastQueued)
		if len(w.pending) == 0 {
			wait = 0
		}
		for _, j := range w.pending {
			wait = min(wait, w.maxDelay-time.Since(j.queued))
		}
		w.mu.Unlock()
		if wait <= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-stopped:
			return false
		case <-time.After(wait):
		}
	}
}

// putBack queues jobs whose write failed again, unless a newer request for the claim came in
// meanwhile, and wakes the writer.
func (w *statusWriter) putBack(jobs []statusJob) {
	w.mu.Lock()
	for _, j := range jobs {
		if _, newer := w.pending[j.uid]; !newer {
			w.pending[j.uid] = j
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// next removes and returns the job that has waited longest.
func (w *statusWriter) next() (statusJob, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var oldest statusJob
	found := false
	for _, j := range w.pending {
		if !found || j.queued.Before(oldest.queued) {
			oldest, found = j, true
		}
	}
	delete(w.pending, oldest.uid)
	return oldest, found
}

// apply writes one claim's entries with server-side apply. The claim's UID is a precondition:
// a claim deleted and created again under the same name is not touched. A claim that is gone
// needs nothing.
func (w *statusWriter) apply(ctx context.Context, j statusJob) error {
	status := resourceapply.ResourceClaimStatus()
	if j.devices != nil {
		status.WithDevices(j.devices...)
	}
	claim := resourceapply.ResourceClaim(j.name, j.namespace).WithUID(j.uid).WithStatus(status)
	_, err := w.client.ResourceV1().ResourceClaims(j.namespace).ApplyStatus(ctx, claim, metav1.ApplyOptions{FieldManager: w.manager, Force: true})
	if ignorableStatusError(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("apply status.devices of claim %s/%s: %w", j.namespace, j.name, err)
	}
	return nil
}

// preparedCondition is the condition of a prepared device.
func preparedCondition(now metav1.Time) *metaapply.ConditionApplyConfiguration {
	return metaapply.Condition().WithType(ConditionPrepared).WithStatus(metav1.ConditionTrue).
		WithReason("Prepared").WithMessage("the device is prepared on the node").WithLastTransitionTime(now)
}

// ignorableStatusError reports errors that leave nothing to do: the claim is gone, or was
// replaced by another claim of the same name (the UID precondition fails with a conflict;
// ownership conflicts cannot happen with Force).
func ignorableStatusError(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}
