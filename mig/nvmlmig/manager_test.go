package nvmlmig_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// giSummary is what a test can see of a fake GPU's instances: "profile@start/CIs".
func giSummary(m *gputest.Machine, gpu int) []string {
	var out []string
	for _, gi := range m.GPUInstances(gpu) {
		var cis []string
		for _, ci := range gi.ComputeInstances {
			cis = append(cis, ci.Profile)
		}
		out = append(out, fmt.Sprintf("%s@%d[%s] id=%d", gi.Profile, gi.Placement.Start, strings.Join(cis, ","), gi.ProfileID))
	}
	return out
}

func newManager(t *testing.T, opts ...gputest.Option) (*gputest.Machine, *nvmlmig.InstanceManager) {
	t.Helper()
	m, err := gputest.New("dgx-a100-40gb", opts...)
	if err != nil {
		t.Fatal(err)
	}
	mg, err := nvmlmig.NewInstanceManager(m.Device(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, mg
}

var balanced = []mig.Instance{mig.At("3g.20gb", 4), mig.At("2g.10gb", 0), mig.At("1g.5gb", 2), mig.At("1g.5gb", 3)}

func TestManagerApplyRemove(t *testing.T) {
	m, mg := newManager(t)
	created, err := mg.Apply(balanced)
	if err != nil {
		t.Fatal(err)
	}
	if !m.MIGEnabled(0) {
		t.Error("MIG mode not enabled")
	}
	// Profile Ids are the hardware ones (research §1.3): 2g=14, 1g=19, 3g=9.
	want := []string{"1g.5gb@2[1g.5gb] id=19", "1g.5gb@3[1g.5gb] id=19", "2g.10gb@0[2g.10gb] id=14", "3g.20gb@4[3g.20gb] id=9"}
	got := giSummary(m, 0)
	if diff := cmp.Diff(want, sortedCopy(got)); diff != "" {
		t.Errorf("instances after Apply (-want +got):\n%s", diff)
	}
	for _, c := range created {
		if c.Reused {
			t.Errorf("%v reported reused on an empty GPU", c.Instance)
		}
	}

	// Idempotent: the same layout again reuses every instance.
	again, err := mg.Apply(balanced)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range again {
		if !c.Reused || c.GPUInstanceID != created[i].GPUInstanceID || c.ComputeInstanceID != created[i].ComputeInstanceID {
			t.Errorf("second Apply %d: %+v, first %+v", i, c, created[i])
		}
	}
	if diff := cmp.Diff(got, giSummary(m, 0)); diff != "" {
		t.Errorf("second Apply changed the GPU (-before +after):\n%s", diff)
	}

	// A conflicting request fails validation and creates nothing.
	_, err = mg.Apply([]mig.Instance{mig.At("4g.20gb", 0)})
	var ve *mig.ValidationError
	if !errors.As(err, &ve) {
		t.Errorf("conflicting Apply: %v, want *ValidationError", err)
	}
	// The GPU is full (7 compute slices): one more instance does not fit.
	if _, err := mg.Apply([]mig.Instance{{Profile: "1g.5gb"}}); !errors.As(err, &ve) {
		t.Errorf("Apply on a full GPU: %v", err)
	}
	if err := mg.Remove(balanced[3:]); err != nil {
		t.Fatal(err)
	}
	// Unplaced instances are planned around the existing ones: of the free 1g placements 3 and
	// 6, slice 3 keeps 6-7 usable by a 1g.10gb (placement 6:2).
	more, err := mg.Apply([]mig.Instance{{Profile: "1g.5gb"}})
	if err != nil {
		t.Fatal(err)
	}
	if more[0].Instance.Placement.Start != 3 {
		t.Errorf("planned 1g.5gb at %d, want 3", more[0].Instance.Placement.Start)
	}

	if err := mg.Remove(balanced); err != nil {
		t.Fatal(err)
	}
	if got := giSummary(m, 0); len(got) != 0 {
		t.Errorf("instances left after Remove: %v", got)
	}
	if err := mg.Remove(balanced); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	current, err := mg.Current()
	if err != nil || len(current) != 0 {
		t.Errorf("Current after Remove: %v %v", current, err)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// nvmlMethods are the NVML calls the InstanceManager may make, named as gputest counts them.
var nvmlMethods = []string{
	"Device.GetMigMode", "Device.SetMigMode", "Device.GetGpuInstanceProfileInfo", "Device.GetGpuInstances",
	"Device.CreateGpuInstanceWithPlacement", "GpuInstance.GetInfo", "GpuInstance.GetComputeInstanceProfileInfo",
	"GpuInstance.GetComputeInstances", "GpuInstance.CreateComputeInstance", "ComputeInstance.GetInfo",
}

// TestManagerFaultInjection fails every NVML call Apply makes, one at a time, and checks that Apply
// returns the NVML error and leaves the GPU as it found it — both on an empty GPU and with an
// existing instance that the layout reuses.
func TestManagerFaultInjection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []gputest.Option
		layout []mig.Instance
	}{
		{"empty GPU", nil, balanced},
		{"reuse", []gputest.Option{gputest.WithMIG(0, "3g.20gb@4")}, balanced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Dry run: how often is each method called?
			m, mg := newManager(t, tc.opts...)
			before := map[string]int{}
			for _, meth := range nvmlMethods {
				before[meth] = m.Calls(meth)
			}
			if _, err := mg.Apply(tc.layout); err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, meth := range nvmlMethods {
				calls := m.Calls(meth) - before[meth]
				total += calls
				for n := 1; n <= calls; n++ {
					fm, fmg := newManager(t, tc.opts...)
					initial := giSummary(fm, 0)
					if err := fm.InjectFault(meth, n, nvml.ERROR_UNKNOWN); err != nil {
						t.Fatal(err)
					}
					_, err := fmg.Apply(tc.layout)
					if !errors.Is(err, nvml.ERROR_UNKNOWN) {
						t.Errorf("fault at %s call %d: error %v, want ERROR_UNKNOWN wrapped", meth, n, err)
						continue
					}
					if !strings.Contains(err.Error(), "GPU-") {
						t.Errorf("fault at %s call %d: error %q does not name the GPU", meth, n, err)
					}
					fm.ClearFaults()
					if diff := cmp.Diff(initial, giSummary(fm, 0)); diff != "" {
						t.Errorf("fault at %s call %d left instances behind (-before +after):\n%s", meth, n, diff)
					}
				}
			}
			for _, meth := range []string{"Device.CreateGpuInstanceWithPlacement", "GpuInstance.CreateComputeInstance"} {
				if m.Calls(meth)-before[meth] == 0 {
					t.Errorf("%s was never called", meth)
				}
			}
			t.Logf("%d NVML calls, each failed once", total)
		})
	}
}

func TestManagerErrorContext(t *testing.T) {
	m, mg := newManager(t)
	if err := m.InjectFault("CreateGpuInstanceWithPlacement", 2, nvml.ERROR_INSUFFICIENT_RESOURCES); err != nil {
		t.Fatal(err)
	}
	_, err := mg.Apply(balanced)
	if !errors.Is(err, nvml.ERROR_INSUFFICIENT_RESOURCES) || !strings.Contains(err.Error(), "create GPU instance 2g.10gb at 0 on GPU GPU-") {
		t.Errorf("error %q lacks context", err)
	}
	// A failing rollback is reported too, and the instance it could not remove is left.
	m, mg = newManager(t)
	_ = m.InjectFault("CreateComputeInstance", 2, nvml.ERROR_UNKNOWN)
	_ = m.InjectFault("GpuInstance.Destroy", 1, nvml.ERROR_IN_USE)
	_, err = mg.Apply(balanced)
	if !errors.Is(err, nvml.ERROR_UNKNOWN) || !errors.Is(err, nvml.ERROR_IN_USE) || !strings.Contains(err.Error(), "roll back") {
		t.Errorf("rollback failure not reported: %v", err)
	}
}

// TestManagerSetMigModeAnswers: go-nvml's SetMigMode returns NVML's activation status first and
// the call's return second. A busy GPU (status IN_USE) or one that needs a reset leaves the new
// mode pending: Apply reports ResetRequiredError and creates nothing. A call that fails (no
// permission; the status is left unset) is that error, not a pending mode.
func TestManagerSetMigModeAnswers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status, ret nvml.Return
		wantReset   bool
		wantErr     error
	}{
		{"reset required", nvml.ERROR_RESET_REQUIRED, nvml.SUCCESS, true, nil},
		{"GPU in use", nvml.ERROR_IN_USE, nvml.SUCCESS, true, nil},
		{"no permission", nvml.SUCCESS, nvml.ERROR_NO_PERMISSION, false, nvml.ERROR_NO_PERMISSION},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, mg := newManager(t)
			dev := m.Device(0)
			dev.SetMigModeFunc = func(int) (nvml.Return, nvml.Return) { return tc.status, tc.ret }
			_, err := mg.Apply(balanced)
			var rr *nvmlmig.ResetRequiredError
			switch {
			case tc.wantReset && (!errors.As(err, &rr) || !strings.HasPrefix(rr.GPU, "GPU-")):
				t.Errorf("Apply = %v, want a ResetRequiredError naming the GPU", err)
			case tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || errors.As(err, &rr)):
				t.Errorf("Apply = %v, want an error wrapping %v, not a pending mode", err, tc.wantErr)
			}
			if got := giSummary(m, 0); len(got) != 0 {
				t.Errorf("instances created although MIG mode did not change: %v", got)
			}
		})
	}
}
