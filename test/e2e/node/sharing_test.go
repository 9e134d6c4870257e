package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/mpspod"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

// gpuConfig is an opaque GpuConfig for the driver, as a claim writes it.
func gpuConfig(sharingJSON string) resourceapi.DeviceClaimConfiguration {
	return resourceapi.DeviceClaimConfiguration{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
		Driver:     driverName,
		Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": ` + sharingJSON + `}`)},
	}}}
}

// hostState is the fake machine's host state (time slices, compute modes, MPS daemons) that
// the plugin keeps in its state directory, as a real host keeps them in the driver.
func (s *Suite) hostState(t *testing.T) sharingtest.HostState {
	t.Helper()
	h, err := sharingtest.OpenFakeHost(filepath.Join(s.Node.Kubelet.RootDir, "plugins", driverName, "fake-host.json"))
	if err != nil {
		t.Fatal(err)
	}
	return h.State()
}

// TestNodeTimeSlicing: a pod whose claim asks for time-slicing (interval Long) runs with its
// GPU; the GPU's time slice is set while it runs and back to the default once kubelet has
// unprepared the claim.
func TestNodeTimeSlicing(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claimTemplate(ctx, t, ns, "ts", "gpu.nvidia.com", 1, gpuConfig(`{"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}`))
	pod := s.runPod(ctx, t, workloadPod(ns, "ts", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("ts")}, "main"))
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	s.checkGPUNodes(ctx, t, pod, devs, "main")
	uuid := strAttr(s.device(ctx, t, devs[0]), "uuid")
	if got := s.hostState(t).TimeSlices[uuid]; got == 0 {
		t.Errorf("GPU %s: time slice %d while the pod runs, want the Long interval set", uuid, got)
	}
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
	if got := s.hostState(t).TimeSlices[uuid]; got != 0 {
		t.Errorf("GPU %s: time slice %d after unprepare, want the default (0)", uuid, got)
	}
}

// TestNodeMPS: two containers of a pod share one GPU through MPS: both get the GPU and the
// daemon's pipe directory (mounted where CUDA_MPS_PIPE_DIRECTORY says), the daemon runs while
// the pod does, and after unprepare it is gone and the GPU is back in compute mode DEFAULT. On
// the fake machine the daemon and its shm tmpfs are recorded by the fake host, not real: the
// shm mount's propagation into containers needs a real daemon (not checked here).
func TestNodeMPS(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claimTemplate(ctx, t, ns, "mps", "gpu.nvidia.com", 1, gpuConfig(`{"strategy": "MPS"}`))
	pod := s.runPod(ctx, t, workloadPod(ns, "mps", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("mps")}, "a", "b"))
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	want := s.wantGPUNodes(ctx, t, devs...)
	for _, c := range []string{"a", "b"} {
		r := s.report(ctx, t, pod, c)
		if diff := cmp.Diff(want, seen(r.Devices)); diff != "" {
			t.Errorf("container %s: device nodes (-want +got):\n%s", c, diff)
		}
		pipe := r.Env["CUDA_MPS_PIPE_DIRECTORY"]
		if pipe == "" {
			t.Errorf("container %s: CUDA_MPS_PIPE_DIRECTORY not set (env %v)", c, r.Env)
			continue
		}
		if _, mounted := r.Mounts[pipe]; !mounted {
			t.Errorf("container %s: the MPS pipe directory %s is not mounted (mounts %v)", c, pipe, r.Mounts)
		}
		if entries := r.Dirs[pipe]; len(entries) > 0 && strings.HasPrefix(entries[0], "error:") {
			t.Errorf("container %s: cannot read the MPS pipe directory %s: %v", c, pipe, entries)
		}
		// The daemon's shm directory is bind-mounted as /dev/shm. On the host (ext4 here) it
		// is a tmpfs only if the plugin's mount propagated out of its container.
		if fstype := r.Mounts["/dev/shm"]; fstype != "tmpfs" {
			t.Errorf("container %s: /dev/shm is %q, want the MPS daemon's tmpfs (mounts %v)", c, fstype, r.Mounts)
		}
	}
	uuid := strAttr(s.device(ctx, t, devs[0]), "uuid")
	st := s.hostState(t)
	if len(st.Daemons) != 1 || st.ComputeModes[uuid] != sharing.ComputeModeExclusiveProcess {
		t.Errorf("while the pod runs: daemons %v, compute mode of %s %v; want one daemon and EXCLUSIVE_PROCESS", st.Daemons, uuid, st.ComputeModes[uuid])
	}
	var shmDirs []string
	for _, d := range st.Daemons {
		shmDirs = append(shmDirs, d.ShmDir)
		var sfs unix.Statfs_t
		if err := unix.Statfs(d.ShmDir, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
			t.Errorf("on the host, MPS daemon %s's shm directory %s is not a tmpfs (statfs type %#x, %v): the plugin's mount did not propagate", d.ID, d.ShmDir, sfs.Type, err)
		}
	}
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
	st = s.hostState(t)
	if len(st.Daemons) != 0 || st.ComputeModes[uuid] != sharing.ComputeModeDefault {
		t.Errorf("after unprepare: daemons %v, compute mode of %s %v; want none and DEFAULT", st.Daemons, uuid, st.ComputeModes[uuid])
	}
	for _, d := range shmDirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after unprepare: the shm directory %s is still there (%v)", d, err)
		}
	}
}

// TestNodeMPSShares (issue 27, item 3): two pods whose claims each ask for 10Gi of GPU 0's
// memory (consumable capacity) run under MPS with a control daemon each, in a daemon pod each:
// each daemon was told its claim's 10Gi before any client connected, the containers'
// environment carries no MPS limit a tenant could raise, each claim's CDI spec mounts its own
// daemon's pipe directory, and the GPU is in compute mode DEFAULT while both run (one MPS
// server each) and back to what it was once both pods are gone.
func TestNodeMPSShares(t *testing.T) {
	ctx := context.Background()
	s := suite
	s.reinstall(ctx, t, map[string]any{"consumableMemory": true})
	ns := s.namespace(ctx, t)
	spec := claimSpec("gpu.nvidia.com", 1)
	spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes['%s'].index == 0", driverName)}}}
	spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
		Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}}
	var pods []*corev1.Pod
	for _, name := range []string{"share-a", "share-b"} {
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
		if _, err := s.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, s.runPod(ctx, t, workloadPod(ns, name, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(name)}, "main")))
	}
	var uuid string
	var claims []string
	pipes := map[string]bool{}
	for _, pod := range pods {
		claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
		claims = append(claims, string(claim.UID))
		uuid = strAttr(s.device(ctx, t, devs[0]), "uuid")
		s.mpsDaemonPod(ctx, t, string(claim.UID))
		dir := filepath.Join(s.Node.Kubelet.RootDir, "plugins", driverName, "mps", string(claim.UID))
		dspec := sharing.MPSDaemonSpec{ID: string(claim.UID), Dir: dir, PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), ShmDir: filepath.Join(dir, "shm")}
		cmds, err := mpspod.Commands(dspec)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(cmds, "set_default_device_pinned_mem_limit 0 10240M") {
			t.Errorf("pod %s: its claim's MPS daemon got commands %q, want set_default_device_pinned_mem_limit 0 10240M", pod.Name, cmds)
		}
		r := s.report(ctx, t, pod, "main")
		for k, v := range r.Env {
			if strings.HasPrefix(k, "CUDA_MPS_") && k != "CUDA_MPS_PIPE_DIRECTORY" {
				t.Errorf("pod %s: the workload's environment carries %s=%s: its claim's daemon enforces the share", pod.Name, k, v)
			}
		}
		pipe := r.Env["CUDA_MPS_PIPE_DIRECTORY"]
		if _, mounted := r.Mounts[pipe]; pipe == "" || !mounted {
			t.Errorf("pod %s: the MPS pipe directory %q is not mounted (mounts %v)", pod.Name, pipe, r.Mounts)
		}
		for _, hostPipe := range s.cdiMounts(t, string(claim.UID), sharing.MPSPipeContainerPath) {
			if hostPipe != dspec.PipeDir {
				t.Errorf("pod %s: its CDI spec mounts %s as the pipe directory, want its claim's own daemon's %s", pod.Name, hostPipe, dspec.PipeDir)
			}
			pipes[hostPipe] = true
		}
	}
	if len(pipes) != 2 {
		t.Errorf("the two shares' containers mount pipe directories %v, want two different ones", pipes)
	}
	st := s.hostState(t)
	if len(st.Daemons) != 2 || st.ComputeModes[uuid] != sharing.ComputeModeDefault {
		t.Errorf("while both pods run: daemons %v, compute mode of %s %v; want one daemon per claim and DEFAULT", st.Daemons, uuid, st.ComputeModes[uuid])
	}
	for i, pod := range pods {
		s.deletePod(ctx, t, pod)
		s.waitUnprepared(ctx, t, claims[i])
	}
	if st := s.hostState(t); len(st.Daemons) != 0 || st.ComputeModes[uuid] != sharing.ComputeModeDefault {
		t.Errorf("after both unprepares: daemons %v, compute mode of %s %v; want none and DEFAULT", st.Daemons, uuid, st.ComputeModes[uuid])
	}
}

// TestNodeMPSDaemonSurvivesPluginRestart: an MPS claim's control daemon runs in a pod of its own
// (the chart's default), so deleting the plugin's pod (the DaemonSet recreates it) and then the
// chart's rolling update of the plugin leave it alone: the same daemon pod (same UID, no
// container restart) still serves its control socket and the workload still runs. The daemon got the claim's pinned
// memory limit from the plugin and the workload's environment carries no MPS limit it could
// raise. Deleting the workload removes the daemon pod, its directories and its shm tmpfs.
func TestNodeMPSDaemonSurvivesPluginRestart(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claimTemplate(ctx, t, ns, "mps-limit", "gpu.nvidia.com", 1,
		gpuConfig(`{"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "10Gi"}}`))
	pod := s.runPod(ctx, t, workloadPod(ns, "mps-limit", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("mps-limit")}, "main"))
	claim, _ := s.allocatedDevices(ctx, t, pod, "gpu")
	daemon := s.mpsDaemonPod(ctx, t, string(claim.UID))
	dir := filepath.Join(s.Node.Kubelet.RootDir, "plugins", driverName, "mps", string(claim.UID))
	spec := sharing.MPSDaemonSpec{ID: string(claim.UID), Dir: dir, PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), ShmDir: filepath.Join(dir, "shm")}

	cmds, err := mpspod.Commands(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cmds, "set_default_device_pinned_mem_limit 0 10240M") {
		t.Errorf("the MPS daemon got commands %q, want set_default_device_pinned_mem_limit 0 10240M", cmds)
	}
	r := s.report(ctx, t, pod, "main")
	for k, v := range r.Env {
		if strings.HasPrefix(k, "CUDA_MPS_") && k != "CUDA_MPS_PIPE_DIRECTORY" {
			t.Errorf("the workload's environment carries %s=%s: the daemon enforces the claim's limits", k, v)
		}
	}

	// A restart: the plugin pod is deleted and the DaemonSet makes a new one.
	plugins, err := s.pluginPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plugins {
		if err := s.Client.CoreV1().Pods(releaseNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.checkMPSDaemonKept(ctx, t, "the plugin's restart", plugins, daemon, spec, pod)
	// An upgrade: the chart's rolling update (the new plugin pod beside the old, then the old goes).
	if plugins, err = s.pluginPods(ctx); err != nil {
		t.Fatal(err)
	}
	s.rollDaemonSet(ctx, t)
	s.checkMPSDaemonKept(ctx, t, "the plugin's rolling update", plugins, daemon, spec, pod)

	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
	var left []corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		left, err = s.mpsDaemonPods(ctx, string(claim.UID))
		return err == nil && len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("daemon pods of the claim are still there after it was unprepared (%v): %d, the first %v", err, len(left), daemonName(left))
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(spec.ShmDir, &sfs); err == nil && sfs.Type == unix.TMPFS_MAGIC {
		t.Errorf("after unprepare: the shm tmpfs %s is still mounted", spec.ShmDir)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after unprepare: the daemon's directory %s is still there (%v)", dir, err)
	}
}

// checkMPSDaemonKept waits until the plugin pods of before are gone and a new one is ready, then
// checks that the MPS daemon pod is still daemon (same UID, no restart), that its control socket
// accepts and that the workload pod still runs its first containers.
func (s *Suite) checkMPSDaemonKept(ctx context.Context, t *testing.T, after string, before []corev1.Pod, daemon *corev1.Pod, spec sharing.MPSDaemonSpec, workload *corev1.Pod) {
	t.Helper()
	if err := s.waitPluginGone(ctx, before); err != nil {
		t.Fatal(err)
	}
	if err := s.waitPluginReady(ctx); err != nil {
		t.Fatal(err)
	}
	now := s.mpsDaemonPod(ctx, t, spec.ID)
	if now.UID != daemon.UID || restarts(now) != 0 || now.DeletionTimestamp != nil {
		t.Errorf("after %s: daemon pod %s (UID %s, %d restarts, deleting %v), want the same pod %s running on",
			after, now.Name, now.UID, restarts(now), now.DeletionTimestamp != nil, daemon.UID)
	}
	if up, err := sharing.ProbeMPSControl(spec); !up || err != nil {
		t.Errorf("after %s: the daemon's control socket %s does not accept (%v)", after, spec.ControlSocket(), err)
	}
	running := s.runningPod(ctx, t, workload)
	if restarts(running) != 0 {
		t.Errorf("after %s: the workload's containers restarted: %s", after, containerStates(running))
	}
	s.checkBeforeKept(ctx, t, workload)
}

// daemonName names the first pod of pods, for errors.
func daemonName(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "none"
	}
	return pods[0].Name
}
