package cdi_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
)

// TestValidateAgreesWithCDILibrary checks Validate against what the CDI library says when it
// loads the same spec from a file, as a runtime does.
func TestValidateAgreesWithCDILibrary(t *testing.T) {
	good := func() *specs.Spec {
		return &specs.Spec{
			Version: "0.5.0", Kind: "k8s.gpu.nvidia.com/claim",
			ContainerEdits: specs.ContainerEdits{Env: []string{"A=b"}},
			Devices: []specs.Device{{Name: uidGPU + "-gpu-0", ContainerEdits: specs.ContainerEdits{
				DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 195}},
			}}},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*specs.Spec)
		want   string // empty: valid
	}{
		{name: "valid", change: func(*specs.Spec) {}},
		{name: "version too low for a name starting with a digit", change: func(s *specs.Spec) { s.Version = "0.3.0" }, want: "at least v0.5.0"},
		{name: "unknown version", change: func(s *specs.Spec) { s.Version = "9.9.9" }, want: "invalid version"},
		{name: "kind without class", change: func(s *specs.Spec) { s.Kind = "k8s.gpu.nvidia.com" }, want: "must be <vendor>/<class>"},
		{name: "bad vendor", change: func(s *specs.Spec) { s.Kind = "-x/claim" }, want: "invalid vendor"},
		{name: "no devices", change: func(s *specs.Spec) { s.Devices = nil }, want: "no devices"},
		{name: "duplicate device", change: func(s *specs.Spec) { s.Devices = append(s.Devices, s.Devices[0]) }, want: "defined twice"},
		{name: "bad device name", change: func(s *specs.Spec) { s.Devices[0].Name = "a/b" }, want: "invalid character"},
		{name: "empty device", change: func(s *specs.Spec) { s.Devices[0].ContainerEdits = specs.ContainerEdits{} }, want: "no container edits"},
		{name: "bad env", change: func(s *specs.Spec) { s.ContainerEdits.Env = []string{"=x"} }, want: "invalid environment variable"},
		{name: "node without path", change: func(s *specs.Spec) { s.Devices[0].ContainerEdits.DeviceNodes[0].Path = "" }, want: "invalid (empty) device path"},
		{name: "bad permissions", change: func(s *specs.Spec) { s.Devices[0].ContainerEdits.DeviceNodes[0].Permissions = "x" }, want: "invalid permissions"},
		{name: "mount without container path", change: func(s *specs.Spec) {
			s.ContainerEdits.Mounts = []*specs.Mount{{HostPath: "/h"}}
		}, want: "empty container path"},
		{name: "hook without path", change: func(s *specs.Spec) {
			s.ContainerEdits.Hooks = []*specs.Hook{{HookName: "createContainer"}}
		}, want: "empty path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.change(s)
			err := cdi.Validate(s)
			if tc.want == "" && err != nil {
				t.Errorf("Validate = %v, want nil", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v, want error containing %q", err, tc.want)
			}
			data, merr := json.Marshal(s)
			if merr != nil {
				t.Fatal(merr)
			}
			p := filepath.Join(t.TempDir(), "spec.json")
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, libErr := cdiapi.ReadSpec(p, 0)
			if (err == nil) != (libErr == nil) {
				t.Errorf("Validate = %v but the CDI library says %v", err, libErr)
			}
		})
	}
	if err := cdi.Validate(nil); err == nil {
		t.Error("Validate(nil) succeeded")
	}
}
