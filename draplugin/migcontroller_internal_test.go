package draplugin

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/gpu/gputest"
)

// TestDisableMIGRepublishesOnlyAChange: every full-GPU prepare on a dynamic-MIG node asks for
// MIG mode off. Only a GPU that was in MIG mode changes what the node publishes; asking about
// one already out of it must not rebuild and republish the node's slices (a full pool build and
// comparison per prepare).
func TestDisableMIGRepublishesOnlyAChange(t *testing.T) {
	// GPU 0 is in MIG mode without instances, GPU 1 is not in MIG mode.
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIG(0))
	if err != nil {
		t.Fatal(err)
	}
	uuid := func(i int) string {
		u, ret := machine.Device(i).GetUUID()
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		return u
	}
	republished := 0
	ctrl := &republishingMIG{MIGController: NewNVMLMIGController(machine, nil), changed: func() { republished++ }}
	ctx := context.Background()
	for _, step := range []struct {
		gpu         int
		wantChanged bool
	}{
		{gpu: 1, wantChanged: false},
		{gpu: 0, wantChanged: true},
		{gpu: 0, wantChanged: false}, // now off
	} {
		before := republished
		changed, err := ctrl.DisableMIG(ctx, uuid(step.gpu))
		if err != nil {
			t.Fatalf("DisableMIG on GPU %d: %v", step.gpu, err)
		}
		if changed != step.wantChanged {
			t.Errorf("DisableMIG on GPU %d: changed = %v, want %v", step.gpu, changed, step.wantChanged)
		}
		if got, want := republished-before, map[bool]int{true: 1, false: 0}[step.wantChanged]; got != want {
			t.Errorf("DisableMIG on GPU %d: %d republish requests, want %d", step.gpu, got, want)
		}
	}
	if mode, _, _ := machine.Device(0).GetMigMode(); mode != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("GPU 0 MIG mode = %d after DisableMIG, want disabled", mode)
	}
}
