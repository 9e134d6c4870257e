package sharing

import (
	"encoding/json"
	"fmt"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// RecordVersion is the Record format version written by this package.
const RecordVersion = 1

// Record is what Prepare did for one claim: the sharing setup and container edits of each
// device, and every host change in the order it was made, with the value it replaced. It is
// JSON-serializable so that it can live in a checkpoint; Undo reverses exactly its steps, and
// Manager.Restore rebuilds the conflict registry from the records of prepared claims.
type Record struct {
	// Version is RecordVersion.
	Version int `json:"version"`
	// ClaimUID identifies the claim.
	ClaimUID types.UID `json:"claimUID"`
	// Namespace is the claim's namespace.
	Namespace string `json:"namespace"`
	// Name is the claim's name.
	Name string `json:"name"`
	// Devices are the claim's devices of this driver, in allocation result order.
	Devices []PreparedDevice `json:"devices"`
	// Steps are the host changes, in the order they were made.
	Steps []Step `json:"steps,omitempty"`
	// Partial marks the record that a failed Prepare returns with its error: Steps are then
	// only the host changes that Prepare made and could not undo. Such a record is
	// checkpointed and passed to Undo like any other; it serves no container.
	Partial bool `json:"partial,omitempty"`
}

// PreparedDevice is the sharing setup of one allocated device.
type PreparedDevice struct {
	// Request is the allocation result's request name.
	Request string `json:"request"`
	// Pool is the allocation result's pool name.
	Pool string `json:"pool"`
	// Device is the allocation result's device name.
	Device string `json:"device"`
	// UUID identifies the device (GPU or MIG UUID).
	UUID string `json:"uuid"`
	// ParentUUID is the UUID of the physical GPU of a MIG device ("" for a full GPU).
	ParentUUID string `json:"parentUUID,omitempty"`
	// Strategy is Exclusive, TimeSlicing or MPS. It is MPS for a device allocated a fraction of
	// its memory even without an MPS config, because MPS is what enforces the fraction.
	Strategy v1beta1.SharingStrategy `json:"strategy"`
	// TimeSlice is the nvidia-smi time slice value (0-3) under TimeSlicing.
	TimeSlice *int `json:"timeSlice,omitempty"`
	// MPSDaemonID is the MPS control daemon serving the device under MPS.
	MPSDaemonID string `json:"mpsDaemonID,omitempty"`
	// PinnedMemoryLimitMiB is the MPS pinned device memory limit of the device, 0 for none.
	PinnedMemoryLimitMiB int64 `json:"pinnedMemoryLimitMiB,omitempty"`
	// ShareID is the allocation's share ID, set when several claims may use the device.
	ShareID string `json:"shareID,omitempty"`
	// AdminAccess devices get no sharing setup and never conflict.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// Edits are the container edits of the device: the cdi package merges them into the
	// device's CDI spec. Empty for Exclusive and TimeSlicing.
	Edits cdispec.ContainerEdits `json:"edits"`
}

// StepAction is one kind of host change.
type StepAction string

const (
	// ActionSetComputeMode changed a device's compute mode.
	ActionSetComputeMode StepAction = "SetComputeMode"
	// ActionSetTimeSlice changed a GPU's time slice.
	ActionSetTimeSlice StepAction = "SetTimeSlice"
	// ActionStartMPSDaemon started an MPS control daemon.
	ActionStartMPSDaemon StepAction = "StartMPSDaemon"
)

// Step is one host change made by Prepare.
type Step struct {
	// Action is what was done.
	Action StepAction `json:"action"`
	// Resource is the host setting the step holds ("computeMode/<uuid>", "timeSlice/<uuid>",
	// "mpsDaemon/<id>"). Claims that share a device hold the same resource; the last claim to
	// let go of it undoes the step.
	Resource string `json:"resource"`
	// UUID is the device of a compute mode or time slice step.
	UUID string `json:"uuid,omitempty"`
	// ComputeMode is the compute mode set.
	ComputeMode *ComputeMode `json:"computeMode,omitempty"`
	// PreviousComputeMode is the compute mode ComputeMode replaced.
	PreviousComputeMode *ComputeMode `json:"previousComputeMode,omitempty"`
	// TimeSlice is the time slice set.
	TimeSlice *int `json:"timeSlice,omitempty"`
	// PreviousTimeSlice is the value TimeSlice replaced; nil when the host could not report
	// it (Undo then restores 0, Default).
	PreviousTimeSlice *int `json:"previousTimeSlice,omitempty"`
	// Daemon is the daemon started.
	Daemon *MPSDaemonSpec `json:"daemon,omitempty"`
	// Changed is false when the host already had the wanted value, so there is nothing to
	// restore; the step still holds the resource against conflicting claims.
	Changed bool `json:"changed"`
}

// DeepCopy returns a copy of r that shares no memory with it.
func (r *Record) DeepCopy() *Record {
	if r == nil {
		return nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("sharing: marshaling a Record cannot fail: %v", err))
	}
	out := new(Record)
	if err := json.Unmarshal(data, out); err != nil {
		panic(fmt.Sprintf("sharing: unmarshaling a marshaled Record cannot fail: %v", err))
	}
	return out
}

// The names of the host resources steps hold.
func resourceComputeMode(uuid string) string { return "computeMode/" + uuid }
func resourceTimeSlice(uuid string) string   { return "timeSlice/" + uuid }
func resourceDaemon(id string) string        { return "mpsDaemon/" + id }
