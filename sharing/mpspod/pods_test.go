package mpspod_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/mpspod"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

const (
	ns   = "gpu-dra-driver"
	node = "node-1"
	uid  = "3f2c6a1e-8d4b-4c2a-9e7f-5b1d0c9a8e21"
)

func testSpec(t *testing.T) sharing.MPSDaemonSpec {
	dir, err := os.MkdirTemp("", "mpspod")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := filepath.Join(dir, uid)
	return sharing.MPSDaemonSpec{ID: uid, DeviceUUIDs: []string{"GPU-a"}, Dir: d, PipeDir: filepath.Join(d, "pipe"),
		LogDir: filepath.Join(d, "log"), ShmDir: filepath.Join(d, "shm"), ShmSizeBytes: 1 << 20,
		ActiveThreadPercentage: ptr.To(50), PinnedMemoryLimits: map[string]string{"0": "16384M"}}
}

func newDaemons(t *testing.T, client *fake.Clientset, host *sharingtest.FakeHost) *mpspod.Daemons {
	d, err := mpspod.New(mpspod.Config{Client: client, Namespace: ns, NodeName: node, Image: "driver:v1",
		Args: []string{"--nvml=fake"}, DriverRoot: "/run/nvidia/driver", PriorityClassName: "system-node-critical",
		Mounter: host, ReadyTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPodShape: the daemon pod runs on this node whatever its taints, restarts always, mounts
// the daemon's directory at its host path with HostToContainer propagation and the driver root
// read-only, and carries the daemon's spec to its command.
func TestPodShape(t *testing.T) {
	spec := testSpec(t)
	d := newDaemons(t, fake.NewClientset(), sharingtest.NewFakeHost())
	pod, err := d.Pod(spec)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != mpspod.PodName(node, uid) || pod.Namespace != ns || pod.Spec.NodeName != node ||
		pod.Spec.RestartPolicy != corev1.RestartPolicyAlways || pod.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("pod %s/%s on %q, restart %s, priority %q", pod.Namespace, pod.Name, pod.Spec.NodeName, pod.Spec.RestartPolicy, pod.Spec.PriorityClassName)
	}
	if diff := cmp.Diff([]corev1.Toleration{{Operator: corev1.TolerationOpExists}}, pod.Spec.Tolerations); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	if got := pod.Labels; got[mpspod.NodeLabel] != node || got[mpspod.DaemonLabel] != uid || got[mpspod.ComponentLabel] != mpspod.ComponentValue {
		t.Errorf("labels %v", got)
	}
	c := pod.Spec.Containers[0]
	var got sharing.MPSDaemonSpec
	if len(c.Args) != 2 || json.Unmarshal([]byte(c.Args[0][len("--spec="):]), &got) != nil || c.Args[1] != "--nvml=fake" {
		t.Fatalf("args %q: want --spec=<JSON> --nvml=fake", c.Args)
	}
	if diff := cmp.Diff(spec, got); diff != "" {
		t.Errorf("spec in the args (-want +got):\n%s", diff)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m := mounts[spec.Dir]; m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("daemon directory mount %+v: want %s at its host path with HostToContainer", m, spec.Dir)
	}
	if m := mounts["/driver-root"]; !m.ReadOnly {
		t.Errorf("driver root mount %+v: want read-only", m)
	}
	if !pod.Spec.HostNetwork {
		t.Errorf("the daemon pod needs a pod network: it uses unix sockets only")
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("the daemon pod gets an API token")
	}
	if sc := c.SecurityContext; sc.Privileged != nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("unprivileged config, security context %+v", sc)
	}
}

// TestStartAdoptRunStop: Start creates the pod and mounts the shm tmpfs; a second Start (a
// restarted plugin, a retried prepare) adopts the pod; Ready waits for the pod's command to apply
// the limits; Stop deletes the pod, waits for the socket to go and removes the directories.
func TestStartAdoptRunStop(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	spec := testSpec(t)
	client, host := fake.NewClientset(), sharingtest.NewFakeHost()
	d := newDaemons(t, client, host)
	if err := d.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	first, err := client.CoreV1().Pods(ns).Get(ctx, mpspod.PodName(node, uid), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if host.State().Mounts[spec.ShmDir] != 1<<20 {
		t.Errorf("shm tmpfs not mounted: %v", host.State().Mounts)
	}
	if err := newDaemons(t, client, host).Start(ctx, spec); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if again, _ := client.CoreV1().Pods(ns).Get(ctx, mpspod.PodName(node, uid), metav1.GetOptions{}); again.UID != first.UID || again.ResourceVersion != first.ResourceVersion {
		t.Errorf("second Start replaced the pod")
	}
	if running, err := d.Running(ctx, spec); running || err != nil {
		t.Errorf("Running before the pod's command runs: %v, %v", running, err)
	}
	// The pod's command, as kubelet would run it.
	podCtx, stopPod := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mpspod.Run(podCtx, spec, &mpspod.FakeControl{Spec: spec}, 5*time.Second) }()
	if err := d.Ready(ctx, spec); err != nil {
		t.Fatal(err)
	}
	cmds, err := mpspod.Commands(spec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec.DefaultCommands(), cmds); diff != "" {
		t.Errorf("commands the daemon got (-want +got):\n%s", diff)
	}
	// kubelet: the pod's deletion sends SIGTERM to its command.
	go func() {
		for {
			if _, err := client.CoreV1().Pods(ns).Get(ctx, mpspod.PodName(node, uid), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				stopPod()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if err := d.Stop(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("the pod's command: %v", err)
	}
	if _, ok := host.State().Mounts[spec.ShmDir]; ok {
		t.Errorf("shm tmpfs still mounted")
	}
	if _, err := os.Stat(spec.PipeDir); !os.IsNotExist(err) {
		t.Errorf("pipe directory still there: %v", err)
	}
	// Stopping again (a retried undo) finds nothing to do.
	if err := d.Stop(ctx, spec); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestStartRefusesAnotherNodesPod: a pod of the daemon's name on another node is not adopted.
func TestStartRefusesAnotherNodesPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	spec := testSpec(t)
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: mpspod.PodName(node, uid), Namespace: ns}, Spec: corev1.PodSpec{NodeName: "node-2"}})
	if err := newDaemons(t, client, sharingtest.NewFakeHost()).Start(ctx, spec); err == nil {
		t.Errorf("Start adopted the daemon pod of another node")
	}
}

// jsonArg decodes the JSON of a "--spec=<JSON>" argument.
func jsonArg(arg string, into any) error {
	return json.Unmarshal([]byte(strings.TrimPrefix(arg, "--spec=")), into)
}

// TestPodName: the name depends on the daemon and the node only: the same on every call, and
// different on another node (a shared daemon's ID comes from its GPU's UUID, which fake machines
// repeat on every node).
func TestPodName(t *testing.T) {
	first, again := mpspod.PodName(node, uid), mpspod.PodName(node, uid)
	if first != again {
		t.Errorf("PodName is not deterministic: %q, then %q", first, again)
	}
	if mpspod.PodName(node, "shared-0123456789ab") == mpspod.PodName("node-2", "shared-0123456789ab") {
		t.Errorf("two nodes' daemons of one ID get one pod name")
	}
	if got := mpspod.PodName(node, "Not_A/Name"); !strings.HasPrefix(got, "mps-control-daemon-") || strings.ContainsAny(got, "_/N") {
		t.Errorf("PodName of an ID that is no DNS name: %q", got)
	}
}
