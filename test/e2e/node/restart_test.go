package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// TestNodeKubeletRestart: kubelet restarts while a pod with a prepared claim runs; the pod's
// container keeps running (same container, no restart), the claim stays prepared, and deleting
// the pod afterwards unprepares it cleanly.
func TestNodeKubeletRestart(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claimTemplate(ctx, t, ns, "one-gpu", "gpu.nvidia.com", 1)
	pod := s.runPod(ctx, t, workloadPod(ns, "survivor", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}, "main"))
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	before := pod.Status.ContainerStatuses[0].ContainerID
	oldSlices, err := s.nodeSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Node.Kubelet.Restart(ctx, s.Client); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// Let kubelet resync the pod once: a restart that loses the claim shows as a new container.
	time.Sleep(5 * time.Second)
	if err := s.waitRecreated(ctx, oldSlices, devs...); err != nil {
		t.Fatalf("after kubelet's restart: %v", err)
	}
	// kubelet deletes the node's slices when it starts; the plugin publishes them again about a
	// second later, not after the helper's 30-second sync delay (which took 14–27 s here).
	took := time.Since(restarted)
	t.Logf("the pool had the claim's devices again %s after kubelet was back", took.Round(time.Millisecond))
	if took > 12*time.Second {
		t.Errorf("the node's slices came back %s after kubelet's restart: the plugin did not republish when kubelet deleted them", took.Round(time.Second))
	}
	after := s.runningPod(ctx, t, pod)
	if c := after.Status.ContainerStatuses[0]; c.ContainerID != before || c.RestartCount != 0 {
		t.Errorf("container after kubelet's restart: %s (restarts %d), want %s unchanged", c.ContainerID, c.RestartCount, before)
	}
	if specs := s.cdiSpecsOf(t, string(claim.UID)); len(specs) != 1 {
		t.Errorf("claim %s has CDI specs %v after kubelet's restart, want one", claim.UID, specs)
	}
	s.checkGPUNodes(ctx, t, after, devs, "main")
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
}

// TestNodePluginKilled: the plugin's container is killed (SIGKILL) while kubelet prepares a
// new pod's claim (right after the scheduler allocated it). kubelet restarts the container,
// retries the prepare, and the pod starts with its GPU; the claim ends with exactly one spec,
// and none once the pod is gone.
func TestNodePluginKilled(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claim(ctx, t, ns, "victim", "gpu.nvidia.com", 1)
	pids := s.pluginPIDs(ctx, t)
	_, err := s.Client.CoreV1().Pods(ns).Create(ctx, workloadPod(ns, "during-kill", corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To("victim")}, "main"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := s.Client.ResourceV1().ResourceClaims(ns).Get(ctx, "victim", metav1.GetOptions{})
		return err == nil && c.Status.Allocation != nil, nil
	})
	if err != nil {
		t.Fatalf("claim not allocated: %v", err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill the plugin (pid %d): %v", pid, err)
		}
	}
	if err := s.waitPluginReady(ctx); err != nil {
		t.Fatal(err)
	}
	pod := s.runningPod(ctx, t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "during-kill"}})
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	s.checkGPUNodes(ctx, t, pod, devs, "main")
	if specs := s.cdiSpecsOf(t, string(claim.UID)); len(specs) != 1 {
		t.Errorf("claim %s has CDI specs %v, want one", claim.UID, specs)
	}
	restarts := 0
	plugins, err := s.pluginPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plugins {
		for _, c := range p.Status.ContainerStatuses {
			restarts += int(c.RestartCount)
		}
	}
	if restarts == 0 {
		t.Errorf("the plugin's container was not restarted: the kill did not take")
	}
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
}

// runningPod waits for pod to be Running and Ready and returns it.
func (s *Suite) runningPod(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return p.Status.Phase == corev1.PodRunning && podReady(p), nil
	})
	if err != nil {
		state := "never seen"
		if last != nil {
			state = fmt.Sprintf("phase %s, %s", last.Status.Phase, containerStates(last))
		}
		t.Fatalf("pod %s/%s not running: %v (%s)\nevents:\n%s", pod.Namespace, pod.Name, err, state, s.events(ctx, pod.Namespace))
	}
	return last
}

// pluginPIDs returns the host PIDs of the plugin containers' main processes (from containerd's
// task list).
func (s *Suite) pluginPIDs(ctx context.Context, t *testing.T) []int {
	t.Helper()
	pods, err := s.pluginPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Node.Containerd.Ctr(ctx, "tasks", "list")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range pods {
		for _, c := range p.Status.ContainerStatuses {
			id := strings.TrimPrefix(c.ContainerID, "containerd://")
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) >= 2 && f[0] == id {
					pid, err := strconv.Atoi(f[1])
					if err != nil {
						t.Fatalf("ctr tasks list: %q: %v", line, err)
					}
					pids = append(pids, pid)
				}
			}
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no running plugin container in containerd's tasks:\n%s", out)
	}
	return pids
}

// waitRecreated waits until the node's pool publishes devices again in slices none of which is
// one of before: kubelet deleted the old ones, and the plugin created new ones.
func (s *Suite) waitRecreated(ctx context.Context, before []resourceapi.ResourceSlice, devices ...string) error {
	old := map[types.UID]bool{}
	for _, sl := range before {
		old[sl.UID] = true
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := s.nodeSlices(ctx)
		if err != nil {
			return false, nil
		}
		have := map[string]bool{}
		for _, sl := range slices {
			if old[sl.UID] {
				last = "slice " + sl.Name + " was not deleted"
				return false, nil
			}
			for _, d := range sl.Spec.Devices {
				have[d.Name] = true
			}
		}
		for _, d := range devices {
			if !have[d] {
				last = "device " + d + " is not published"
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the node's slices were not recreated (%s): %w", last, err)
	}
	return nil
}

// waitPublished waits until the node's slices publish every device named.
func (s *Suite) waitPublished(ctx context.Context, devices ...string) error {
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := s.nodeSlices(ctx)
		if err != nil {
			return false, nil
		}
		have := map[string]bool{}
		for _, sl := range slices {
			for _, d := range sl.Spec.Devices {
				have[d.Name] = true
			}
		}
		missing = missing[:0]
		for _, d := range devices {
			if !have[d] {
				missing = append(missing, d)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("devices %v of node %s not published: %w", missing, nodeName, err)
	}
	return nil
}
