package main

import (
	"errors"
	"strings"
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

// TestDaemonPodPull: --daemon-image-pull-secrets and --daemon-image-pull-policy reach the IMEX
// daemon pods; a Secret name or policy Kubernetes would refuse is a usage error naming the flag.
func TestDaemonPodPull(t *testing.T) {
	o := &controllerOptions{daemonImage: "registry.example.com/driver:1", daemonServiceAccount: "sa",
		daemonPullSecrets: []string{"registry-a", "registry-b"}, daemonPullPolicy: "Always"}
	if err := o.validatePull(); err != nil {
		t.Fatal(err)
	}
	spec := o.daemonPod().Spec
	type view struct {
		Secrets []corev1.LocalObjectReference
		Policy  corev1.PullPolicy
	}
	want := view{[]corev1.LocalObjectReference{{Name: "registry-a"}, {Name: "registry-b"}}, corev1.PullAlways}
	if diff := cmp.Diff(want, view{spec.ImagePullSecrets, spec.Containers[0].ImagePullPolicy}); diff != "" {
		t.Errorf("daemon pod pull settings (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		secrets []string
		policy  string
		want    string
	}{
		{[]string{"Registry_A"}, "", "--daemon-image-pull-secrets: \"Registry_A\" is not a Secret name"},
		{nil, "Sometimes", "--daemon-image-pull-policy=\"Sometimes\": want Always, IfNotPresent or Never"},
	} {
		o := &controllerOptions{daemonPullSecrets: tc.secrets, daemonPullPolicy: tc.policy}
		err := o.validatePull()
		var usage *usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("secrets %q, policy %q: %v, want a usage error containing %q", tc.secrets, tc.policy, err, tc.want)
		}
	}
}
