package chart

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

func daemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	ds, err := framework.DaemonSetFrom(objs)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func volume(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Volume {
	t.Helper()
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	t.Fatalf("the pod has no volume %s", name)
	return nil
}

// TestPluginPodHardening: in both modes the plugin pod runs with the runtime's seccomp profile
// and a read-only root file system, with /tmp an emptyDir; every other writable mount is a host
// path the plugin owns.
func TestPluginPodHardening(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"real-gpus":         nil,
		"fake-machine":      {"fakeMachine": map[string]any{"name": "l4x8"}},
		"fake-with-root":    {"fakeMachine": map[string]any{"name": "l4x8", "driverRoot": "/opt/fake"}},
		"gpu-operator-root": {"nvidiaDriverRoot": "/run/nvidia/driver"},
	} {
		t.Run(name, func(t *testing.T) {
			spec := &daemonSet(t, render(t, kubeVersion, vals)).Spec.Template.Spec
			if sc := spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod securityContext %+v: want seccompProfile RuntimeDefault", sc)
			}
			for _, c := range spec.Containers {
				sc := c.SecurityContext
				if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("container %s: want readOnlyRootFilesystem true", c.Name)
				}
				if sc != nil && sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("container %s overrides the pod's seccomp profile with %s", c.Name, sc.SeccompProfile.Type)
				}
				var tmp bool
				for _, m := range c.VolumeMounts {
					v := volume(t, spec, m.Name)
					switch {
					case m.MountPath == "/tmp":
						tmp = v.EmptyDir != nil
					case v.HostPath == nil:
						t.Errorf("container %s: mount %s at %s is neither /tmp nor a host path", c.Name, m.Name, m.MountPath)
					}
				}
				if !tmp {
					t.Errorf("container %s: /tmp is not an emptyDir; tools writing temporary files fail on a read-only root", c.Name)
				}
			}
		})
	}
}

// TestDriverRootMayAppearLater: the driver root's host path is DirectoryOrCreate, so a GPU
// operator driver container that mounts /run/nvidia/driver after the plugin pod started does
// not keep the pod from starting; the mount propagates into the running container.
func TestDriverRootMayAppearLater(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"gpu-operator": {"nvidiaDriverRoot": "/run/nvidia/driver"},
		"fake-root":    {"fakeMachine": map[string]any{"name": "l4x8", "driverRoot": "/opt/fake"}},
	} {
		t.Run(name, func(t *testing.T) {
			spec := &daemonSet(t, render(t, kubeVersion, vals)).Spec.Template.Spec
			v := volume(t, spec, "driver-root")
			if v.HostPath == nil || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
				t.Errorf("driver-root volume %+v: want hostPath type DirectoryOrCreate", v.VolumeSource)
			}
			for _, m := range spec.Containers[0].VolumeMounts {
				if m.Name == "driver-root" && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
					t.Errorf("driver-root mount: want mountPropagation HostToContainer")
				}
			}
		})
	}
}

// TestMPSMountsReachTheHost: where the plugin mounts MPS shm tmpfs (real GPUs, and a fake
// machine with mountTmpfs) it runs privileged and its plugin directory propagates mounts both
// ways, so the host (and the containers that bind-mount the shm directory as /dev/shm) see the
// daemon's tmpfs, not an empty directory; the unprivileged fake mode mounts nothing and may not
// ask for Bidirectional (the API server refuses it for an unprivileged container).
func TestMPSMountsReachTheHost(t *testing.T) {
	for name, tc := range map[string]struct {
		vals       map[string]any
		privileged bool
		flag       bool
	}{
		"real-gpus":          {vals: nil, privileged: true},
		"gpu-operator-root":  {vals: map[string]any{"nvidiaDriverRoot": "/run/nvidia/driver"}, privileged: true},
		"fake-machine":       {vals: map[string]any{"fakeMachine": map[string]any{"name": "l4x8"}}},
		"fake-with-tmpfs":    {vals: map[string]any{"fakeMachine": map[string]any{"name": "l4x8", "mountTmpfs": true}}, privileged: true, flag: true},
		"fake-tmpfs-no-root": {vals: map[string]any{"fakeMachine": map[string]any{"name": "l4x8", "driverRoot": "/opt/fake", "mountTmpfs": true}}, privileged: true, flag: true},
	} {
		t.Run(name, func(t *testing.T) {
			c := daemonSet(t, render(t, kubeVersion, tc.vals)).Spec.Template.Spec.Containers[0]
			privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
			if privileged != tc.privileged {
				t.Errorf("privileged = %v, want %v", privileged, tc.privileged)
			}
			var prop corev1.MountPropagationMode
			for _, m := range c.VolumeMounts {
				if m.Name == "plugin-dir" && m.MountPropagation != nil {
					prop = *m.MountPropagation
				}
			}
			if want := map[bool]corev1.MountPropagationMode{true: corev1.MountPropagationBidirectional}[tc.privileged]; prop != want {
				t.Errorf("plugin-dir mountPropagation = %q, want %q", prop, want)
			}
			var flag bool
			for _, a := range c.Args {
				flag = flag || a == "--fake-mps-tmpfs"
			}
			if flag != tc.flag {
				t.Errorf("--fake-mps-tmpfs in args = %v, want %v (args %v)", flag, tc.flag, c.Args)
			}
		})
	}
}
