package sharing_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOwnDaemonEnforcesPinnedLimit: the pinned memory limit of a claim's own MPS daemon is the
// daemon's (its spec, sent with set_default_device_pinned_mem_limit), and the containers'
// environment carries no CUDA_MPS_PINNED_DEVICE_MEM_LIMIT that a tenant could raise.
func TestOwnDaemonEnforcesPinnedLimit(t *testing.T) {
	cfg := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`
	h := newHost()
	rec, err := newManager(t, h).Prepare(ctxFor(t), newClaim(uidA, results(result("gpu", "gpu-0")), claimCfg(cfg, "gpu")), lookup)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rec.Devices {
		if i := slices.IndexFunc(d.Edits.Env, func(e string) bool { return strings.HasPrefix(e, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=") }); i >= 0 {
			t.Errorf("device %s: container env carries %s", d.Device, d.Edits.Env[i])
		}
	}
	daemons := h.State().Daemons
	if len(daemons) != 1 {
		t.Fatalf("daemons %v, want one", daemons)
	}
	for _, spec := range daemons {
		if diff := cmp.Diff([]string{"set_default_device_pinned_mem_limit 0 10240M"}, spec.DefaultCommands()); diff != "" {
			t.Errorf("daemon %s commands (-want +got):\n%s", spec.ID, diff)
		}
	}
}
