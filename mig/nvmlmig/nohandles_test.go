package nvmlmig_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

// noHandles are the answers of an NVML that lists no MIG device handles.
var noHandles = []nvml.Return{nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND}

// TestListInstancesWithoutMIGDeviceHandles (issue 28, defect 1): where GetMaxMigDeviceCount is
// not supported, ListInstances finds the same GPU and compute instances through the GPU
// instances, only without the MIG device UUIDs.
func TestListInstancesWithoutMIGDeviceHandles(t *testing.T) {
	for _, ret := range noHandles {
		t.Run(ret.String(), func(t *testing.T) {
			m, mg := newManager(t, gputest.WithMIG(0, "3g.20gb@4", "2g.10gb@0", "1g.5gb@2", "1c.1g.5gb@3"))
			want, err := nvmlmig.ListInstances(m.Device(0))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.InjectFaultAfter("GetMaxMigDeviceCount", 0, ret); err != nil {
				t.Fatal(err)
			}
			got, err := nvmlmig.ListInstances(m.Device(0))
			if err != nil {
				t.Fatalf("ListInstances: %v", err)
			}
			for i := range want {
				for j := range want[i].ComputeInstances {
					want[i].ComputeInstances[j].UUID = ""
				}
			}
			ignore := cmp.Options{cmpopts.IgnoreFields(nvmlmig.GPUInstanceState{}, "Handle"), cmpopts.IgnoreFields(nvmlmig.ComputeInstanceState{}, "Handle"), cmpopts.IgnoreUnexported(nvml.GpuInstanceProfileInfo{})}
			if diff := cmp.Diff(want, got, ignore); diff != "" {
				t.Errorf("instances without MIG device handles (-want +got):\n%s", diff)
			}
			if _, err := mg.Current(); err != nil {
				t.Errorf("Current: %v", err)
			}
		})
	}
}

// TestDisableMIGWithoutMIGDeviceHandles: turning MIG off does not need MIG device handles.
// With instances left it names them, as with handles; without, MIG mode goes off.
func TestDisableMIGWithoutMIGDeviceHandles(t *testing.T) {
	for _, ret := range noHandles {
		for _, tc := range []struct {
			name    string
			layout  []string
			wantErr string
		}{
			{"no instances", nil, ""},
			{"instances left", []string{"3g.20gb@4", "1c.2g.10gb@0"}, "GPU instances exist: 2g.10gb@0,3g.20gb@4"},
		} {
			t.Run(ret.String()+"/"+tc.name, func(t *testing.T) {
				opts := []gputest.Option{gputest.WithMIG(0, tc.layout...), gputest.WithFaultAfter("GetMaxMigDeviceCount", 0, ret)}
				m, mg := newManager(t, opts...)
				changed, _, err := mg.DisableMIG()
				switch {
				case tc.wantErr == "" && (err != nil || !changed || m.MIGEnabled(0)):
					t.Errorf("DisableMIG = %t, %v; MIG enabled %t; want MIG off", changed, err, m.MIGEnabled(0))
				case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
					t.Errorf("DisableMIG = %v, want an error containing %q", err, tc.wantErr)
				}
			})
		}
	}
}

// TestListEnabledInstances: for a GPU in MIG mode, ListEnabledInstances lists what
// ListInstances lists without reading the mode again, so a mode answer that changes to
// NOT_SUPPORTED does not make the instances vanish.
func TestListEnabledInstances(t *testing.T) {
	m, _ := newManager(t, gputest.WithMIG(0, "3g.20gb@4", "2g.10gb@0"))
	want, err := nvmlmig.ListInstances(m.Device(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.InjectFaultAfter("GetMigMode", 0, nvml.ERROR_NOT_SUPPORTED); err != nil {
		t.Fatal(err)
	}
	if got, err := nvmlmig.ListInstances(m.Device(0)); err != nil || len(got) != 0 {
		t.Fatalf("ListInstances with GetMigMode NOT_SUPPORTED = %v, %v; want no instances", got, err)
	}
	got, err := nvmlmig.ListEnabledInstances(m.Device(0))
	if err != nil {
		t.Fatal(err)
	}
	ignore := cmp.Options{cmpopts.IgnoreFields(nvmlmig.GPUInstanceState{}, "Handle"), cmpopts.IgnoreFields(nvmlmig.ComputeInstanceState{}, "Handle"), cmpopts.IgnoreUnexported(nvml.GpuInstanceProfileInfo{})}
	if diff := cmp.Diff(want, got, ignore); diff != "" {
		t.Errorf("ListEnabledInstances (-want +got):\n%s", diff)
	}
}
