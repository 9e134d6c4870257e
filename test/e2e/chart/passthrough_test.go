package chart

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestChartPassthrough (issue 32): passthrough.enabled adds serve --passthrough; with real GPUs
// also the host's sysfs (read-write) and /dev at the paths the flags name, and the host's PID
// namespace; on a fake machine nothing but the flag (its PCI host is fake). Off by default.
func TestChartPassthrough(t *testing.T) {
	type want struct {
		args    []string
		hostPID bool
		volumes map[string]string // volume name → host path
		mounts  map[string]string // volume name → mount path
	}
	real := want{
		args:    []string{"--passthrough", "--sysfs-root=/host-sys", "--vfio-dev-root=/host-dev"},
		hostPID: true,
		volumes: map[string]string{"host-sys": "/sys", "host-dev": "/dev"},
		mounts:  map[string]string{"host-sys": "/host-sys", "host-dev": "/host-dev"},
	}
	for name, tc := range map[string]struct {
		vals map[string]any
		want want
	}{
		"defaults":     {nil, want{}},
		"real GPUs":    {map[string]any{"passthrough": map[string]any{"enabled": true}}, real},
		"fake machine": {map[string]any{"passthrough": map[string]any{"enabled": true}, "fakeMachine": map[string]any{"name": "l4x8"}}, want{args: []string{"--passthrough"}}},
	} {
		t.Run(name, func(t *testing.T) {
			ds := daemonSet(t, render(t, kubeVersion, tc.vals))
			spec := ds.Spec.Template.Spec
			c := spec.Containers[0]
			got := want{hostPID: spec.HostPID, volumes: map[string]string{}, mounts: map[string]string{}}
			for _, a := range c.Args {
				if slices.Contains([]string{"--passthrough", "--sysfs-root=/host-sys", "--vfio-dev-root=/host-dev"}, a) {
					got.args = append(got.args, a)
				}
			}
			for _, v := range spec.Volumes {
				if v.HostPath != nil && (v.Name == "host-sys" || v.Name == "host-dev") {
					got.volumes[v.Name] = v.HostPath.Path
				}
			}
			for _, m := range c.VolumeMounts {
				if m.Name == "host-sys" || m.Name == "host-dev" {
					got.mounts[m.Name] = m.MountPath
					if m.ReadOnly {
						t.Errorf("mount %s is read-only: binding writes to sysfs", m.Name)
					}
				}
			}
			opts := cmp.Options{cmp.AllowUnexported(want{}), cmp.Transformer("empty", func(m map[string]string) map[string]string {
				if len(m) == 0 {
					return nil
				}
				return m
			})}
			if diff := cmp.Diff(tc.want, got, opts); diff != "" {
				t.Errorf("passthrough in the DaemonSet (-want +got):\n%s", diff)
			}
			if tc.want.hostPID && (c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged) {
				t.Errorf("passthrough with real GPUs: the container is not privileged (%+v)", c.SecurityContext)
			}
		})
	}
}
