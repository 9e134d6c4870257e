package draplugin_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/gpu/gputest"
)

// TestPrepareOnNVIDIAMocks (issue 28): the plugin on go-nvml's own mock servers, every call
// they lack answering ERROR_NOT_SUPPORTED. A whole GPU prepares and unprepares; a dynamic MIG
// device cannot be named to a container there (the mocks list no MIG device handles, so no
// MIG UUID), so its prepare fails with that reason and leaves no instance and no spec.
func TestPrepareOnNVIDIAMocks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		newLib  func() *server.Server
		dynamic bool
		class   string
		wantErr string
	}{
		{"dgxa100 whole GPU", dgxa100.New, false, gpudra.GPUDeviceClassName, ""},
		{"dgxh100 whole GPU, dynamic MIG", dgxh100.New, true, gpudra.GPUDeviceClassName, ""},
		{"dgxa100 MIG partition", dgxa100.New, true, gpudra.MIGDeviceClassName, "no MIG device UUID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []draplugintest.NodeOption{draplugintest.WithNVML(gputest.NotSupported(tc.newLib()))}
			if tc.dynamic {
				opts = append(opts, draplugintest.WithDynamicMIG())
			}
			e := newEnvWith(t, tc.name, opts...)
			p := e.plugin()
			e.reconcile(p)
			c := e.claim(tc.class, "", "")
			_, err := prepareOne(t, p, c)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("prepare: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("prepare = %v, want an error containing %q", err, tc.wantErr)
			case tc.wantErr != "":
				if got := e.MIGInstances(); len(got) != 0 {
					t.Errorf("MIG instances after the failed prepare: %v", got)
				}
				if got := e.specs(); len(got) != 0 {
					t.Errorf("CDI specs after the failed prepare: %v", got)
				}
				return
			}
			if got := e.specs(); len(got) != 1 || got[0] != string(c.UID) {
				t.Errorf("CDI specs after prepare: %v, want the claim's", got)
			}
			if err := unprepareOne(t, p, c); err != nil {
				t.Fatalf("unprepare: %v", err)
			}
			if got := e.specs(); len(got) != 0 {
				t.Errorf("CDI specs after unprepare: %v", got)
			}
		})
	}
}
