package draplugin

import (
	"fmt"
)

// Op is the operation a step belongs to.
type Op string

// The operations of the plugin.
const (
	OpPrepare   Op = "prepare"
	OpUnprepare Op = "unprepare"
)

// Step names one step of prepare or unprepare. A *StepError says which one failed; the step is
// also the "step" label of the errors metric.
type Step string

// The steps that can fail.
const (
	StepValidate     Step = "validate claim"
	StepLock         Step = "lock GPUs"
	StepCheckpoint   Step = "checkpoint"
	StepResolve      Step = "resolve device"
	StepPlanSharing  Step = "resolve sharing config"
	StepCreateMIG    Step = "create MIG instance"
	StepMIGMode      Step = "turn MIG mode off"
	StepApplySharing Step = "apply sharing"
	StepGenerateCDI  Step = "generate CDI spec"
	StepWriteCDI     Step = "write CDI spec"
	StepRollback     Step = "roll back"
	StepRemoveCDI    Step = "remove CDI spec"
	StepUndoSharing  Step = "undo sharing"
	StepDestroyMIG   Step = "destroy MIG instance"
	StepRecover      Step = "recover earlier attempt"
	StepBindVFIO     Step = "bind to vfio-pci"
	StepUnbindVFIO   Step = "unbind from vfio-pci"
)

// StepError is the error of one step of prepare or unprepare, for one device of the claim when
// Device is set. Callers find it with errors.As:
//
//	var se *draplugin.StepError
//	if errors.As(err, &se) && se.Step == draplugin.StepCreateMIG { ... }
type StepError struct {
	// Step is the step that failed.
	Step Step
	// Device is the DRA device name the step worked on, empty for claim-wide steps.
	Device string
	// Err is what went wrong.
	Err error
}

// Error implements error.
func (e *StepError) Error() string {
	if e.Device != "" {
		return fmt.Sprintf("device %s: %s: %v", e.Device, e.Step, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Step, e.Err)
}

// Unwrap returns the step's error.
func (e *StepError) Unwrap() error { return e.Err }

func stepErr(step Step, device string, err error) error {
	return &StepError{Step: step, Device: device, Err: err}
}
