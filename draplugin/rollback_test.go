package draplugin_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/checkpoint"
)

// migMPSConfig shares MIG devices with MPS.
const migMPSConfig = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50}}}`

// twoMIGDevices is a claim for two dynamic 1g.5gb MIG devices of GPU 0, both shared with MPS:
// its prepare creates two GPU and compute instances, changes the host and writes a spec.
func twoMIGDevices(name string) *resourceapi.ResourceClaim {
	c := draplugintest.Claim(name, gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), migMPSConfig)
	second := *c.Spec.Devices.Requests[0].DeepCopy()
	second.Name = "gpu2"
	c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, second)
	c.Spec.Devices.Config[0].Requests = []string{"gpu", "gpu2"}
	return c
}

// failHost makes the fake host refuse the nth change whose description starts with prefix.
func failHost(e *env, prefix string, n int) {
	seen := 0
	e.Host.SetHook(func(call string) error {
		if strings.HasPrefix(call, prefix) {
			if seen++; seen == n {
				return errors.New("injected host failure: " + call)
			}
		}
		return nil
	})
}

// TestFailedPrepareLeavesNothing (issue 28, defect 7): when a step of a prepare fails, the
// prepare undoes what it did before it returns, not at some later retry, unprepare or restart:
// right after the failed call the node has no MIG instance, CDI spec, host change or checkpoint
// entry of the claim. A failure is injected at each side effect in turn.
func TestFailedPrepareLeavesNothing(t *testing.T) {
	const claimName = "claim-two"
	for _, tc := range []struct {
		name string
		// inject makes one side effect of the prepare fail.
		inject func(t *testing.T, e *env)
		// checkpointWrite, when set, fails that checkpoint write (1: the first after the
		// plugin started).
		checkpointWrite int
	}{
		{"second GPU instance", func(t *testing.T, e *env) {
			if err := e.Machine.InjectFault("CreateGpuInstanceWithPlacement", 2, nvml.ERROR_INSUFFICIENT_RESOURCES); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"second compute instance", func(t *testing.T, e *env) {
			if err := e.Machine.InjectFault("CreateComputeInstance", 2, nvml.ERROR_UNKNOWN); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"first compute mode", func(_ *testing.T, e *env) { failHost(e, "SetComputeMode", 1) }, 0},
		{"second compute mode", func(_ *testing.T, e *env) { failHost(e, "SetComputeMode", 2) }, 0},
		{"MPS daemon", func(_ *testing.T, e *env) { failHost(e, "Start", 1) }, 0},
		// The writes: the intent (PrepareStarted), then the completed claim.
		{name: "completed claim in the checkpoint", inject: func(*testing.T, *env) {}, checkpointWrite: 2},
		{"CDI spec", func(t *testing.T, e *env) {
			// The spec cannot be renamed into place: an empty directory has its name (which
			// removing the spec removes).
			if err := os.MkdirAll(filepath.Join(e.CDIDir, "k8s.gpu.nvidia.com-claim_"+string(draplugintest.UID(claimName))+".json"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", true)
			var writes atomic.Int32 // checkpoint writes once armed
			armed := atomic.Bool{}
			p := e.plugin(withHooks(testhooks.Hooks{CheckpointWrite: func(string) error {
				if armed.Load() && int(writes.Add(1)) == tc.checkpointWrite {
					return errors.New("injected: no space left on device")
				}
				return nil
			}}))
			e.reconcile(p)
			c, err := e.Allocate(e.ctx(), twoMIGDevices(claimName))
			if err != nil {
				t.Fatal(err)
			}
			before := e.MIGInstances()
			tc.inject(t, e)
			armed.Store(true)
			_, err = prepareOne(t, p, c)
			switch {
			case err == nil:
				t.Fatal("prepare succeeded despite the injected failure")
			case tc.checkpointWrite > 0 && !strings.Contains(err.Error(), "record PrepareCompleted"):
				t.Fatalf("prepare failed elsewhere than recording the completed claim: %v", err)
			}
			// Right after the failure: nothing of the claim is left.
			e.Host.SetHook(nil)
			// MIG mode is not compared: a GPU published as partitions stays in MIG mode.
			if diff := cmp.Diff(before, e.MIGInstances()); diff != "" {
				t.Errorf("MIG instances after the failed prepare (-before +after):\n%s", diff)
			}
			if err := e.HostClean(); err != nil {
				t.Errorf("host after the failed prepare: %v", err)
			}
			if got := e.specs(); len(got) != 0 {
				t.Errorf("CDI specs after the failed prepare: %v", got)
			}
			b, err := os.ReadFile(filepath.Join(e.StateDir, checkpoint.FileName))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), string(c.UID)) {
				t.Errorf("the checkpoint still records the claim after the failed prepare")
			}
			// And the claim prepares once the failure is gone.
			e.Machine.ClearFaults()
			armed.Store(false)
			if _, err := prepareOne(t, p, c); err != nil {
				t.Errorf("prepare after the failure cleared: %v", err)
			}
		})
	}
}
