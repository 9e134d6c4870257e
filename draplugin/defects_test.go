package draplugin_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
)

// Tests for the node-runtime defects of issue 11, named after them. Each failed on the code
// before its fix.

func TestDefect11RePrepareChecksTheAllocation(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin()
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(3), "")
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	moved := c.DeepCopy()
	moved.Status.Allocation.Devices.Results[0].Device = gpudra.GPUDeviceName(e.Inventory.GPUs[5].Minor)
	_, err := prepareOne(t, p, moved)
	var se *draplugin.StepError
	if !errors.As(err, &se) || se.Step != draplugin.StepValidate || !strings.Contains(err.Error(), "must be unprepared before it is prepared again") {
		t.Fatalf("re-prepare with another device: %v", err)
	}
	if got := e.specs(); len(got) != 1 {
		t.Errorf("specs = %v, want the original claim's only", got)
	}
}

func TestDefect12OtherNodesPool(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", false)
	p := e.plugin()
	c := e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), "")
	c.Status.Allocation.Devices.Results[0].Pool = "node-2"
	_, err := prepareOne(t, p, c)
	var se *draplugin.StepError
	if !errors.As(err, &se) || se.Step != draplugin.StepResolve || !strings.Contains(err.Error(), `pool "node-2"`) {
		t.Fatalf("prepare of another node's device: %v", err)
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("specs = %v, want none", got)
	}
}
