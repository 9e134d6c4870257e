package cdi_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
)

const accelUID = "5f0c3a4e-1b2d-4c6e-8f90-a1b2c3d4e5f6"

// TestNewClaimSpecForAnyDevice: a spec of another vendor's devices, made by NewClaimSpec and
// stored by a Writer of that kind, is what the CDI library injects: the device's node and
// environment, under "<vendor>/<class>=<claimUID>-<device>".
func TestNewClaimSpecForAnyDevice(t *testing.T) {
	dir := t.TempDir()
	w, err := cdi.NewWriter(cdi.WithSpecDir(dir), cdi.WithWriterKind("example.com", "accel"))
	if err != nil {
		t.Fatal(err)
	}
	edits := specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/accel3", Type: "c", Major: 240, Minor: 3}}, Env: []string{"ACCEL_VISIBLE_DEVICES=3"}}
	cs, err := cdi.NewClaimSpec(w.Kind(), accelUID, specs.ContainerEdits{}, []cdi.DeviceEdits{{Name: "accel-3", Edits: edits}})
	if err != nil {
		t.Fatal(err)
	}
	wantID := "example.com/accel=" + accelUID + "-accel-3"
	if diff := cmp.Diff(map[string]string{"accel-3": wantID}, cs.DeviceIDs); diff != "" {
		t.Errorf("device IDs (-want +got):\n%s", diff)
	}
	if _, err := w.Write(cs); err != nil {
		t.Fatal(err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ociSpec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(ociSpec, wantID); err != nil {
		t.Fatalf("inject %s: %v", wantID, err)
	}
	if diff := cmp.Diff([]string{"ACCEL_VISIBLE_DEVICES=3"}, ociSpec.Process.Env); diff != "" {
		t.Errorf("injected env (-want +got):\n%s", diff)
	}
	var paths []string
	for _, d := range ociSpec.Linux.Devices {
		paths = append(paths, d.Path)
	}
	if diff := cmp.Diff([]string{"/dev/accel3"}, paths); diff != "" {
		t.Errorf("injected device nodes (-want +got):\n%s", diff)
	}
}

// TestNewClaimSpecRejects: what a runtime could not use, or that would name another claim's
// device, is an error naming what is wrong.
func TestNewClaimSpecRejects(t *testing.T) {
	node := specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/accel0"}}}
	one := []cdi.DeviceEdits{{Name: "accel-0", Edits: node}}
	cases := []struct {
		name, kind, uid string
		devices         []cdi.DeviceEdits
		want            string
	}{
		{"bad UID", "example.com/accel", "claim-1", one, `claim UID "claim-1"`},
		{"no class", "example.com", accelUID, one, `spec kind "example.com"`},
		{"bad vendor", "Example!/accel", accelUID, one, `CDI vendor "Example!"`},
		{"no devices", "example.com/accel", accelUID, nil, "no devices"},
		{"bad device name", "example.com/accel", accelUID, []cdi.DeviceEdits{{Name: "Accel_0", Edits: node}}, `device name "Accel_0"`},
		{"listed twice", "example.com/accel", accelUID, append(one, one...), `device "accel-0": listed twice`},
		{"mount without host path", "example.com/accel", accelUID, []cdi.DeviceEdits{{Name: "accel-0", Edits: specs.ContainerEdits{
			Mounts: []*specs.Mount{{ContainerPath: "/accel"}}}}}, "invalid mount, empty host path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cdi.NewClaimSpec(c.kind, c.uid, specs.ContainerEdits{}, c.devices)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
