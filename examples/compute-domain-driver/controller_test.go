package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestDaemonPod: the IMEX daemon container runs the daemon command as root (the node plugin's
// daemon directory is root-only; the image's user is not root), with a read-only root file
// system and the host's driver root read-only at /driver-root.
func TestDaemonPod(t *testing.T) {
	o := &controllerOptions{daemonImage: "example.com/driver:1", daemonServiceAccount: "sa", daemonBinary: "/usr/bin/compute-domain-driver", driverRoot: "/run/nvidia/driver"}
	spec := o.daemonPod().Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	type view struct {
		Command      []string
		RunAsUser    *int64
		ReadOnlyRoot *bool
		Mounts       []corev1.VolumeMount
		HostPath     string
	}
	want := view{
		Command:      []string{"/usr/bin/compute-domain-driver", "daemon", "--driver-root=/driver-root"},
		RunAsUser:    ptr.To(int64(0)),
		ReadOnlyRoot: ptr.To(true),
		Mounts:       []corev1.VolumeMount{{Name: "driver-root", MountPath: "/driver-root", ReadOnly: true}},
		HostPath:     "/run/nvidia/driver",
	}
	got := view{Command: c.Command, Mounts: c.VolumeMounts}
	if c.SecurityContext != nil {
		got.RunAsUser, got.ReadOnlyRoot = c.SecurityContext.RunAsUser, c.SecurityContext.ReadOnlyRootFilesystem
	}
	if len(spec.Volumes) == 1 && spec.Volumes[0].HostPath != nil {
		got.HostPath = spec.Volumes[0].HostPath.Path
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("IMEX daemon pod (-want +got):\n%s", diff)
	}
}
