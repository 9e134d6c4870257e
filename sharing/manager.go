package sharing

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// Manager turns allocated claims into sharing setups: it resolves their opaque configs,
// checks them against the other prepared claims of the node, makes the host changes through
// its TimeSlicer, ComputeModeSetter and MPSDaemons, and undoes them. It is safe for concurrent
// use: host actions are serialized per physical GPU (a MIG device counts as its GPU), so a
// slow action on one GPU (an MPS daemon's ready wait) does not hold up claims on other GPUs.
// Build one with NewManager.
type Manager struct {
	driver      string
	decoder     *v1beta1.Decoder
	mpsRoot     string
	timeSlicer  TimeSlicer
	computeMode ComputeModeSetter
	daemons     MPSDaemons
	registry    *Registry
	// cleanupTimeout bounds the undo of a failed Prepare, which ignores the caller's deadline.
	cleanupTimeout time.Duration

	shmSize int64

	locks gpuLocks
	// dirsMu orders Prepare's claim on a daemon directory (inflight) against CleanMPSDirs.
	dirsMu   sync.Mutex
	inflight map[string]int
}

// defaultCleanupTimeout bounds the undo of a failed Prepare: long enough for an MPS daemon to
// quit (MPSControl waits up to its ready timeout, 30s by default) and a few driver commands.
const defaultCleanupTimeout = 2 * time.Minute

// Option configures NewManager.
type Option func(*Manager)

// WithMPSRoot sets the host directory under which each MPS daemon gets <id>/{pipe,log,shm}
// (default /var/lib/kubelet/plugins/<driver>/mps).
func WithMPSRoot(dir string) Option { return func(m *Manager) { m.mpsRoot = dir } }

// WithMPSShmSize sets the size in bytes of the tmpfs mounted on each MPS daemon's shm
// directory (default DefaultMPSShmSize, 1 GiB; a size of 0 or less keeps the default). It
// bounds the shared memory that the clients of one daemon can fill on the node.
func WithMPSShmSize(bytes int64) Option { return func(m *Manager) { m.shmSize = bytes } }

// WithTimeSlicer sets how time slices are read and set (for example an NvidiaSMI).
func WithTimeSlicer(t TimeSlicer) Option { return func(m *Manager) { m.timeSlicer = t } }

// WithComputeModeSetter sets how compute modes are read and set (for example an NVMLComputeMode).
func WithComputeModeSetter(c ComputeModeSetter) Option { return func(m *Manager) { m.computeMode = c } }

// WithMPSDaemons sets how MPS control daemons are run (for example an MPSControl).
func WithMPSDaemons(d MPSDaemons) Option { return func(m *Manager) { m.daemons = d } }

// WithDecoder sets the config decoder (default v1beta1.NewDecoder()).
func WithDecoder(d *v1beta1.Decoder) Option { return func(m *Manager) { m.decoder = d } }

// NewManager returns a manager for the devices and opaque configs of the DRA driver named
// driverName, with an empty registry. Host interfaces that are not given make Prepare fail for
// the strategies that need them, with an error naming the option.
func NewManager(driverName string, opts ...Option) *Manager {
	m := &Manager{driver: driverName, registry: NewRegistry(), cleanupTimeout: defaultCleanupTimeout, inflight: map[string]int{}}
	for _, o := range opts {
		o(m)
	}
	if m.decoder == nil {
		m.decoder = v1beta1.NewDecoder()
	}
	if m.shmSize <= 0 {
		m.shmSize = DefaultMPSShmSize
	}
	if m.mpsRoot == "" {
		m.mpsRoot = filepath.Join("/var/lib/kubelet/plugins", m.driver, "mps")
	}
	return m
}

// Registry returns the manager's registry of prepared claims.
func (m *Manager) Registry() *Registry { return m.registry }

// Restore rebuilds the registry from the records of the claims that are prepared (read from
// a checkpoint at start-up), so that conflicts and shared host settings are tracked across
// restarts. It makes no host change.
func (m *Manager) Restore(records []Record) error { return m.registry.Restore(records) }

// Sync is Restore for the claims on some physical GPUs (Registry.Sync): a caller that shares
// the node with another process (two plugin pods during a rolling update) syncs the GPUs it is
// about to work on from the checkpoint both write, so that it sees the other's claims.
func (m *Manager) Sync(records []Record, gpus []string) error { return m.registry.Sync(records, gpus) }

// Prepare sets up sharing for one allocated claim and returns its record: per device the
// container edits to put into its CDI spec, and the host changes made, to be checkpointed and
// passed to Undo on unprepare. lookup maps the claim's allocation results to devices. The
// claim's UID must be a canonical lower-case UUID, as Kubernetes makes them
// (cdi.ValidateClaimUID): it names the claim's own MPS daemon and that daemon's directories.
//
// Prepare is idempotent per claim UID: a claim already prepared (also one used by several
// pods or containers) gets its existing record back without host changes. A claim that
// conflicts with a prepared claim fails with an error naming both.
//
// When a host change fails, Prepare undoes the changes made so far before it returns the
// error. That cleanup runs under context.WithoutCancel(ctx), bounded by its own timeout, so
// that a caller's deadline that expired during the change (kubelet's, during the MPS ready
// wait) does not stop it. What the cleanup could not undo is returned together with the
// error as a partial record (Record.Partial set, Steps the changes left on the host); the
// record is nil when everything was undone, and always nil when Prepare changed nothing. A
// caller that gets a non-nil record with an error must checkpoint it and pass it to Undo
// later, until Undo succeeds. Until then the claim stays registered with the partial record:
// conflict checks count its devices, and a retried Prepare of the claim first undoes it (and
// when that fails again, returns the remaining partial record with the error).
func (m *Manager) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim, lookup DeviceLookup) (*Record, error) {
	if claim == nil || lookup == nil {
		return nil, errors.New("sharing: Prepare needs a claim and a device lookup, got nil")
	}
	if err := validateClaimUID(claim); err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "claimUID", claim.UID)
	ctx = klog.NewContext(ctx, logger)
	if rec, done, err := m.reuse(ctx, claim); done {
		return rec, err
	}
	p, err := m.plan(ctx, claim, lookup)
	if err != nil {
		return nil, err
	}
	unlock := m.locks.lock(physicalGPUs(p.rec))
	defer unlock()
	if rec, ok := m.registry.Get(claim.UID); ok {
		// A concurrent Prepare of the claim got there first.
		if rec.Partial {
			return &rec, fmt.Errorf("claim %s: a concurrent Prepare of the claim failed and left host changes; retry", ClaimString(claim))
		}
		return &rec, nil
	}
	if err := m.registry.Check(p.rec); err != nil {
		return nil, err
	}
	defer m.claimDirs(p.daemons)()
	if err := m.apply(ctx, p, false); err != nil {
		partial, uerr := m.cleanup(ctx, p.rec)
		if uerr != nil {
			err = fmt.Errorf("%w; rolling back: %w", err, uerr)
		}
		return partial, fmt.Errorf("claim %s: %w", ClaimString(claim), err)
	}
	m.registry.add(p.rec)
	logger.V(2).Info("Prepared sharing", "devices", len(p.rec.Devices), "hostChanges", len(p.rec.Steps))
	return p.rec.DeepCopy(), nil
}

// reuse handles a claim that is registered already, under the locks of its GPUs: a prepared
// claim's record is returned (done); the partial record of an earlier failed Prepare is undone
// first, and when that fails, what is still left is returned (done) with the error. done is
// false when Prepare is to go on.
func (m *Manager) reuse(ctx context.Context, claim *resourceapi.ResourceClaim) (*Record, bool, error) {
	reg, ok := m.registry.Get(claim.UID)
	if !ok {
		return nil, false, nil
	}
	unlock := m.locks.lock(physicalGPUs(&reg))
	defer unlock()
	if reg, ok = m.registry.Get(claim.UID); !ok {
		return nil, false, nil
	}
	logger := klog.FromContext(ctx)
	if !reg.Partial {
		logger.V(3).Info("Claim already prepared, reusing its sharing setup")
		return &reg, true, nil
	}
	logger.V(2).Info("Undoing the host changes left by an earlier failed Prepare", "hostChanges", len(reg.Steps))
	if partial, err := m.cleanup(ctx, &reg); err != nil {
		return partial, true, fmt.Errorf("claim %s: undoing the host changes left by an earlier failed Prepare: %w", ClaimString(claim), err)
	}
	return nil, false, nil
}

// cleanup undoes the host changes of a failed Prepare under a context that the caller's
// cancellation does not reach. It registers what it could not undo as a partial record and
// returns a copy of it; when everything was undone, it forgets the claim and returns nil.
func (m *Manager) cleanup(ctx context.Context, rec *Record) (*Record, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cleanupTimeout)
	defer cancel()
	left, err := m.undoSteps(ctx, rec)
	if len(left) == 0 {
		m.registry.remove(rec.ClaimUID)
		return nil, err
	}
	partial := rec.DeepCopy()
	partial.Steps, partial.Partial = left, true
	m.registry.add(partial.DeepCopy())
	klog.FromContext(ctx).Error(err, "Host changes of a failed Prepare could not be undone; keeping them registered", "left", len(left))
	return partial, err
}

// Undo reverses the host changes of a record, newest first, and forgets the claim. A change
// that another prepared claim still holds (a shared device's time slice, compute mode or MPS
// daemon) is left for the last claim to undo. Undo works from the record alone, so it also
// works after a restart (call Restore first, so that shared settings are known).
//
// When a step fails, the others are still tried, and the claim stays registered with a partial
// record (Record.Partial set) whose Steps are only the changes still on the host: the changes
// that were undone no longer count as held, so another claim that needs them makes them again
// instead of joining them, and Shared answers for what is left. The error is an *UndoError
// carrying that record: a caller that checkpoints records should store it in place of rec, so
// that a restart, or another process reading the checkpoint, sees only what is left. Undo can
// be retried with either record; steps undone already are undone again, which changes nothing.
func (m *Manager) Undo(ctx context.Context, rec *Record) error {
	if rec == nil {
		return errors.New("sharing: Undo of a nil record")
	}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(rec.Namespace, rec.Name), "claimUID", rec.ClaimUID)
	ctx = klog.NewContext(ctx, logger)
	unlock := m.locks.lock(physicalGPUs(rec))
	defer unlock()
	if left, err := m.undoSteps(ctx, rec); err != nil {
		partial := rec.DeepCopy()
		partial.Steps, partial.Partial = left, true
		m.registry.add(partial.DeepCopy())
		logger.Error(err, "Host changes could not be undone; keeping them registered", "left", len(left))
		return &UndoError{Left: partial, Err: fmt.Errorf("claim %s/%s (%s): %w", rec.Namespace, rec.Name, rec.ClaimUID, err)}
	}
	m.registry.remove(rec.ClaimUID)
	logger.V(2).Info("Undid sharing setup", "hostChanges", len(rec.Steps))
	return nil
}

// UndoError is Undo's error when some host changes could not be undone.
type UndoError struct {
	// Left is the record of the changes still on the host (Partial set), which the claim stays
	// registered with.
	Left *Record
	// Err says what failed.
	Err error
}

// Error implements error.
func (e *UndoError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *UndoError) Unwrap() error { return e.Err }

// Shared reports whether every host setting of rec (each of its steps) is one that another
// registered claim holds as well (a prepared one, or the partial record of a failed
// Prepare, which the caller checkpointed and which keeps the setting until it is undone).
// Preparing a claim whose plan is Shared only joins what other claims set up, and undoing a
// Shared record restores nothing on the host (Undo leaves what others hold): a crash at any
// point of either leaves the host to the other claims' records, so the caller need not record
// its intent. Call it with the locks of the record's GPUs held, as for Plan and Undo.
func (m *Manager) Shared(rec *Record) bool {
	if rec == nil {
		return true
	}
	for _, s := range rec.Steps {
		if !m.registry.held(s.Resource, rec.ClaimUID) {
			return false
		}
	}
	return true
}

// UndoClaim is Undo for a claim of the registry; an unknown claim is not an error.
func (m *Manager) UndoClaim(ctx context.Context, uid types.UID) error {
	rec, ok := m.registry.Get(uid)
	if !ok {
		return nil
	}
	return m.Undo(ctx, &rec)
}

// apply makes the host changes of a plan, recording each as a step of p.rec. With dry set it
// changes nothing: it reads the current values and records the steps it would make, so that a
// crash between the changes and their record can still restore what they replaced.
func (m *Manager) apply(ctx context.Context, p *plan, dry bool) error {
	rec := p.rec
	a := acquirer{m: m, dry: dry, planned: p.planned}
	done := map[string]bool{}
	for _, d := range rec.Devices {
		if d.TimeSlice == nil || done[d.UUID] {
			continue
		}
		done[d.UUID] = true
		// Time-slicing needs several contexts on the GPU: compute mode DEFAULT.
		if err := a.computeMode(ctx, rec, d.UUID, ComputeModeDefault); err != nil {
			return err
		}
		if err := a.timeSlice(ctx, rec, d.UUID, *d.TimeSlice); err != nil {
			return err
		}
	}
	for _, spec := range p.daemons {
		for _, uuid := range spec.DeviceUUIDs {
			if err := a.computeMode(ctx, rec, uuid, mpsComputeMode(rec, uuid)); err != nil {
				return err
			}
		}
		if err := a.daemon(ctx, rec, spec); err != nil {
			return err
		}
	}
	return nil
}

// mpsComputeMode is the compute mode an MPS device needs: EXCLUSIVE_PROCESS when the claim has
// it to itself (its daemon's server is then the only context on it), DEFAULT when the claim was
// allocated a share of it (a share ID), so that the servers of the claims sharing it can each
// hold a context.
func mpsComputeMode(rec *Record, uuid string) ComputeMode {
	for _, d := range rec.Devices {
		if d.UUID == uuid && d.ShareID != "" {
			return ComputeModeDefault
		}
	}
	return ComputeModeExclusiveProcess
}

// acquirer makes (or, dry, plans) the host changes of one claim.
type acquirer struct {
	m   *Manager
	dry bool
	// planned are the UUIDs of devices that do not exist yet: their settings are a new
	// device's defaults.
	planned map[string]bool
}

// join adds to rec the step another claim holds for resource, if any, so that the shared
// setting is undone by whichever claim lets go of it last.
func (m *Manager) join(ctx context.Context, rec *Record, resource string) bool {
	other, step := m.registry.holder(resource, rec.ClaimUID)
	if step == nil {
		return false
	}
	klog.FromContext(ctx).V(3).Info("Sharing host setting with another claim", "resource", resource, "otherClaim", klog.KRef(other.Namespace, other.Name))
	rec.Steps = append(rec.Steps, *step)
	return true
}

func (a acquirer) computeMode(ctx context.Context, rec *Record, uuid string, mode ComputeMode) error {
	m := a.m
	resource := resourceComputeMode(uuid)
	if other, step := m.registry.holder(resource, rec.ClaimUID); step != nil && step.ComputeMode != nil && *step.ComputeMode != mode {
		return fmt.Errorf("device %s needs compute mode %s, but claim %s/%s (%s) holds it in %s; an MPS daemon that served every claim sharing the device (an earlier version's) must be released first",
			uuid, mode, other.Namespace, other.Name, other.ClaimUID, *step.ComputeMode)
	}
	if m.join(ctx, rec, resource) {
		return nil
	}
	if m.computeMode == nil {
		if a.dry {
			return nil // Prepare will fail and name the option
		}
		return errors.New("setting the compute mode needs a ComputeModeSetter (WithComputeModeSetter)")
	}
	if a.planned[uuid] {
		// A device that does not exist yet has no setting to restore: a rollback destroys it
		// with whatever was set on it.
		return nil
	}
	cur, err := m.computeMode.ComputeMode(ctx, uuid)
	if err != nil {
		return fmt.Errorf("reading compute mode of %s: %w", uuid, err)
	}
	step := Step{Action: ActionSetComputeMode, Resource: resource, UUID: uuid, ComputeMode: &mode, PreviousComputeMode: &cur}
	if cur != mode && a.dry {
		step.Changed = true
	} else if cur != mode {
		if err := m.computeMode.SetComputeMode(ctx, uuid, mode); err != nil {
			return fmt.Errorf("setting compute mode of %s to %s: %w", uuid, mode, err)
		}
		step.Changed = true
		klog.FromContext(ctx).V(2).Info("Set compute mode", "device", uuid, "mode", mode, "previous", cur)
	}
	rec.Steps = append(rec.Steps, step)
	return nil
}

func (a acquirer) timeSlice(ctx context.Context, rec *Record, uuid string, value int) error {
	m := a.m
	resource := resourceTimeSlice(uuid)
	if m.join(ctx, rec, resource) {
		return nil
	}
	if m.timeSlicer == nil {
		if a.dry {
			return nil // Prepare will fail and name the option
		}
		return errors.New("time-slicing needs a TimeSlicer (WithTimeSlicer)")
	}
	cur, known, err := m.timeSlicer.TimeSlice(ctx, uuid)
	if err != nil {
		return fmt.Errorf("reading time slice of %s: %w", uuid, err)
	}
	step := Step{Action: ActionSetTimeSlice, Resource: resource, UUID: uuid, TimeSlice: &value}
	if known {
		step.PreviousTimeSlice = &cur
	}
	step.Changed = !known || cur != value
	// The step is recorded before the set, so that a set cut short by the caller's deadline or
	// cancellation, which nvidia-smi may have applied already, is undone as well (restoring a
	// value that did not change is harmless). A set that failed by itself (nvidia-smi said why:
	// "Not Supported" on a GPU without a compute policy) changed nothing and is not recorded: a
	// restore would fail the same way, every time, and the claim could never be released.
	rec.Steps = append(rec.Steps, step)
	if !step.Changed || a.dry {
		return nil
	}
	if err := m.timeSlicer.SetTimeSlice(ctx, uuid, value); err != nil {
		if ctx.Err() == nil {
			rec.Steps = rec.Steps[:len(rec.Steps)-1]
		}
		return fmt.Errorf("setting time slice of %s to %d: %w", uuid, value, err)
	}
	klog.FromContext(ctx).V(2).Info("Set time slice", "device", uuid, "timeSlice", value, "previous", step.PreviousTimeSlice)
	return nil
}

func (a acquirer) daemon(ctx context.Context, rec *Record, spec MPSDaemonSpec) error {
	m := a.m
	resource := resourceDaemon(spec.ID)
	other, _ := m.registry.holder(resource, rec.ClaimUID)
	if other != nil && !other.Partial {
		m.join(ctx, rec, resource)
		return nil
	}
	if a.dry {
		rec.Steps = append(rec.Steps, Step{Action: ActionStartMPSDaemon, Resource: resource, Daemon: &spec, Changed: true})
		return nil
	}
	if m.daemons == nil {
		return errors.New("MPS needs MPSDaemons (WithMPSDaemons)")
	}
	if other != nil {
		// Only the partial record of a failed Prepare holds the daemon, which may not run:
		// share its step, and start the daemon (starting a running daemon is no error).
		m.join(ctx, rec, resource)
		spec = *rec.Steps[len(rec.Steps)-1].Daemon
	} else {
		// The step is recorded before Start, so that a Start that fails half-way is cleaned up.
		rec.Steps = append(rec.Steps, Step{Action: ActionStartMPSDaemon, Resource: resource, Daemon: &spec, Changed: true})
	}
	if err := m.daemons.Start(ctx, spec); err != nil {
		return fmt.Errorf("starting MPS control daemon %s for %v: %w", spec.ID, spec.DeviceUUIDs, err)
	}
	if err := m.daemons.Ready(ctx, spec); err != nil {
		return fmt.Errorf("MPS control daemon %s for %v not ready: %w", spec.ID, spec.DeviceUUIDs, err)
	}
	klog.FromContext(ctx).V(2).Info("Started MPS control daemon", "daemon", spec.ID, "devices", spec.DeviceUUIDs, "pipeDir", spec.PipeDir)
	return nil
}

// undoSteps undoes the steps of rec, newest first, and returns those that it could not undo,
// in their order, with the errors. Steps another claim still holds and steps that changed
// nothing are not undone and not returned.
func (m *Manager) undoSteps(ctx context.Context, rec *Record) ([]Step, error) {
	logger := klog.FromContext(ctx)
	var errs []error
	var left []Step
	for i := len(rec.Steps) - 1; i >= 0; i-- {
		s := rec.Steps[i]
		if other, _ := m.registry.holder(s.Resource, rec.ClaimUID); other != nil {
			logger.V(3).Info("Host setting still used by another claim, leaving it", "resource", s.Resource, "otherClaim", klog.KRef(other.Namespace, other.Name))
			continue
		}
		if !s.Changed {
			continue
		}
		if err := m.undoStep(ctx, s); err != nil {
			errs = append(errs, err)
			left = append(left, s)
		}
	}
	slices.Reverse(left)
	return left, errors.Join(errs...)
}

func (m *Manager) undoStep(ctx context.Context, s Step) error {
	logger := klog.FromContext(ctx)
	switch s.Action {
	case ActionSetComputeMode:
		if m.computeMode == nil || s.PreviousComputeMode == nil {
			return fmt.Errorf("cannot restore compute mode of %s: no ComputeModeSetter or no previous mode", s.UUID)
		}
		if err := m.computeMode.SetComputeMode(ctx, s.UUID, *s.PreviousComputeMode); err != nil {
			return fmt.Errorf("restoring compute mode of %s to %s: %w", s.UUID, *s.PreviousComputeMode, err)
		}
		logger.V(2).Info("Restored compute mode", "device", s.UUID, "mode", *s.PreviousComputeMode)
	case ActionSetTimeSlice:
		if m.timeSlicer == nil {
			return fmt.Errorf("cannot restore time slice of %s: no TimeSlicer", s.UUID)
		}
		prev := 0
		if s.PreviousTimeSlice != nil {
			prev = *s.PreviousTimeSlice
		}
		if err := m.timeSlicer.SetTimeSlice(ctx, s.UUID, prev); err != nil {
			return fmt.Errorf("restoring time slice of %s to %d: %w", s.UUID, prev, err)
		}
		logger.V(2).Info("Restored time slice", "device", s.UUID, "timeSlice", prev)
	case ActionStartMPSDaemon:
		if m.daemons == nil || s.Daemon == nil {
			return fmt.Errorf("cannot stop MPS control daemon of step %s: no MPSDaemons or no daemon spec", s.Resource)
		}
		if err := m.daemons.Stop(ctx, *s.Daemon); err != nil {
			return fmt.Errorf("stopping MPS control daemon %s: %w", s.Daemon.ID, err)
		}
		logger.V(2).Info("Stopped MPS control daemon", "daemon", s.Daemon.ID)
	default:
		return fmt.Errorf("unknown step action %q: supported values: %q, %q, %q", s.Action, ActionSetComputeMode, ActionSetTimeSlice, ActionStartMPSDaemon)
	}
	return nil
}
