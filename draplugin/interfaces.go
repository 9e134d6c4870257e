package draplugin

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/sharing"
)

// SharingEngine is what the plugin needs from the sharing package; *sharing.Manager implements
// it. The plugin calls it with the GPU locks of the claim's devices held.
type SharingEngine interface {
	// Plan resolves the claim's opaque configs into the sharing setup of each device without
	// touching the host.
	Plan(ctx context.Context, claim *resourceapi.ResourceClaim, lookup sharing.DeviceLookup) (*sharing.Record, error)
	// Prepare makes the host changes of the claim and returns the record that Undo reverses.
	// On error it may also return a record: the partial record (Partial set) of host changes
	// that it made and could not undo. The caller must checkpoint a non-nil partial record and
	// Undo it later (until Undo succeeds); the engine keeps the claim registered with it until
	// then, and a retried Prepare of the claim undoes it first.
	Prepare(ctx context.Context, claim *resourceapi.ResourceClaim, lookup sharing.DeviceLookup) (*sharing.Record, error)
	// Undo reverses a record's host changes (those another claim still holds are kept).
	Undo(ctx context.Context, rec *sharing.Record) error
	// Shared reports whether every host change of a plan or record is also held by another
	// prepared claim: preparing or undoing it then changes nothing on the host.
	Shared(rec *sharing.Record) bool
	// Restore rebuilds the engine's registry of prepared claims after a restart.
	Restore(records []sharing.Record) error
	// Sync rebuilds the registry as Restore does, for the claims on the given GPUs only, which
	// another plugin process may have changed.
	Sync(records []sharing.Record, gpus []string) error
	// ResetPlan turns a plan whose host changes may have been made but not recorded (a crash)
	// into a record whose Undo puts the planned settings back to their defaults; nil when the
	// plan makes no host change.
	ResetPlan(plan *sharing.Record) *sharing.Record
	// RecoverRecord rebuilds the record of a claim whose checkpoint was lost from its devices
	// and the container edits found in its CDI spec.
	RecoverRecord(claimUID types.UID, devices []sharing.PreparedDevice) *sharing.Record
	// SuperviseMPSDaemons restarts the MPS daemons of prepared claims that do not run and
	// returns their IDs. The plugin calls it after Restore, at start-up and periodically.
	SuperviseMPSDaemons(ctx context.Context) ([]string, error)
	// CleanMPSDirs removes the MPS directories no prepared claim uses; the plugin calls it
	// after SuperviseMPSDaemons.
	CleanMPSDirs(ctx context.Context) (sharing.MPSCleanup, error)
}

var _ SharingEngine = (*sharing.Manager)(nil)

// MIGInstance is one GPU instance on a GPU, with its first compute instance when it has one.
type MIGInstance struct {
	// GIProfileID is the NVML GPU-instance profile Id (not the enum).
	GIProfileID int
	// Profile is the canonical GPU-instance profile name ("1g.5gb").
	Profile string
	// Placement is where the GPU instance sits, in memory slices.
	Placement mig.Placement
	// GIID is the GPU instance id.
	GIID int
	// CIID is the id of its compute instance, -1 when it has none.
	CIID int
	// UUID is the MIG device UUID of that compute instance, empty when it has none.
	UUID string
}

// MIGController creates and destroys the MIG instances of dynamic MIG devices on a GPU named
// by UUID. The plugin calls it for one GPU at a time, under that GPU's lock.
// NewNVMLMIGController is the implementation over NVML.
type MIGController interface {
	// Instances lists the GPU instances that exist on the GPU now.
	Instances(ctx context.Context, gpuUUID string) ([]MIGInstance, error)
	// Create creates a GPU instance of the profile at exactly that placement, with a compute
	// instance spanning it, enabling MIG mode if needed. On failure nothing is left behind.
	Create(ctx context.Context, gpuUUID, profile string, placement mig.Placement) (MIGInstance, error)
	// Destroy destroys the GPU instance of the profile at that placement and its compute
	// instances. An instance that does not exist is not an error.
	Destroy(ctx context.Context, gpuUUID, profile string, placement mig.Placement) error
	// DisableMIG turns MIG mode off, so the whole GPU can be used; it fails when GPU instances
	// exist or the change needs a GPU reset. changed reports whether MIG mode was on: a GPU
	// already out of MIG mode is the common case (every full-GPU prepare on a dynamic-MIG
	// node asks), and only a change makes the plugin publish its slices again.
	DisableMIG(ctx context.Context, gpuUUID string) (changed bool, err error)
}
