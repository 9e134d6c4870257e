package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/e2e/framework/kubenode/report"
)

// NVIDIA's device numbers as the fake driver root's /proc/devices states them (cditest).
const (
	nvidiaMajor = 195
	uvmMajor    = 508
)

// controlNodes are the device nodes every GPU container gets besides its GPUs' own.
var controlNodes = []report.Device{
	{Path: "/dev/nvidia-modeset", Type: "c", Major: nvidiaMajor, Minor: 254},
	{Path: "/dev/nvidia-uvm", Type: "c", Major: uvmMajor, Minor: 0},
	{Path: "/dev/nvidia-uvm-tools", Type: "c", Major: uvmMajor, Minor: 1},
	{Path: "/dev/nvidiactl", Type: "c", Major: nvidiaMajor, Minor: 255},
}

// wantGPUNodes is what a container given the full GPUs named devices must see: their
// /dev/nvidia<minor> (minor from the published attribute) and the control nodes, nothing else.
func (s *Suite) wantGPUNodes(ctx context.Context, t *testing.T, devices ...string) []report.Device {
	t.Helper()
	want := append([]report.Device(nil), controlNodes...)
	for _, name := range devices {
		minor := intAttr(s.device(ctx, t, name), "minor")
		want = append(want, report.Device{Path: fmt.Sprintf("/dev/nvidia%d", minor), Type: "c", Major: nvidiaMajor, Minor: uint32(minor)})
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Path < want[j].Path })
	return want
}

// checkGPUNodes checks that each named container of pod sees exactly the device nodes of the
// full GPUs devices and the control nodes (wantGPUNodes).
func (s *Suite) checkGPUNodes(ctx context.Context, t *testing.T, pod *corev1.Pod, devices []string, containers ...string) {
	t.Helper()
	want := s.wantGPUNodes(ctx, t, devices...)
	for _, c := range containers {
		if diff := cmp.Diff(want, seen(s.report(ctx, t, pod, c).Devices)); diff != "" {
			t.Errorf("pod %s, container %s: device nodes (-want +got):\n%s", pod.Name, c, diff)
		}
	}
}

// seen drops what the container could not know in advance (whether opening worked: without an
// NVIDIA kernel module it fails with ENXIO, which still proves the node is the right device).
func seen(devs []report.Device) []report.Device {
	out := make([]report.Device, 0, len(devs))
	for _, d := range devs {
		d.Open = ""
		out = append(out, d)
	}
	return out
}

// TestNodePluginRegistration: kubelet's plugin watcher registered the plugin the chart runs
// (kubelet logs the connection and the health stream it opened), the plugin published the
// node's GPUs, and once the pod is Ready (the chart's startup probe passed) its /healthz, which
// the probes call, answers 200.
func TestNodePluginRegistration(t *testing.T) {
	ctx := context.Background()
	s := suite
	slices, err := s.nodeSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sl := range slices {
		for _, d := range sl.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	if len(names) != gpus {
		t.Errorf("node %s publishes %d devices (%v), want the %d GPUs of %s", nodeName, len(names), names, gpus, machine)
	}
	log, err := os.ReadFile(s.Node.Kubelet.Proc.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"Connection changed" logger="DRA registration handler" driverName="` + driverName + `"`,
		`"Successfully started WatchResources health stream"`,
	} {
		if !strings.Contains(string(log), want) {
			t.Errorf("kubelet's log (%s) does not say %s", s.Node.Kubelet.Proc.LogFile, want)
		}
	}
	// kubelet's probes already passed (the pod is ready); ask once more from the node, at the
	// pod's address on the pod network and the chart's metrics port.
	plugin, err := s.servingPluginPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var port int32
	for _, p := range plugin.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			port = p.ContainerPort
		}
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/healthz", net.JoinHostPort(plugin.Status.PodIP, strconv.Itoa(int(port)))))
	if err != nil {
		t.Fatalf("the plugin's /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s: %s", resp.Status, body)
	}
	pods, err := s.pluginPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount != 0 {
				t.Errorf("plugin pod %s: container %s restarted %d times", p.Name, c.Name, c.RestartCount)
			}
		}
	}
}

// TestNodeExclusiveGPU: a pod with one full-GPU claim runs; its container sees exactly its GPU's
// device node and the control nodes, with NVIDIA_VISIBLE_DEVICES=void (CDI, not the NVIDIA
// runtime hook, gives the devices); deleting the pod makes kubelet unprepare, and the claim's
// CDI spec is gone.
func TestNodeExclusiveGPU(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claimTemplate(ctx, t, ns, "one-gpu", "gpu.nvidia.com", 1)
	pod := s.runPod(ctx, t, workloadPod(ns, "exclusive", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}, "main"))
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	r := s.report(ctx, t, pod, "main")
	if diff := cmp.Diff(s.wantGPUNodes(ctx, t, devs...), seen(r.Devices)); diff != "" {
		t.Errorf("device nodes the container sees (-want +got):\n%s", diff)
	}
	if got := r.Env["NVIDIA_VISIBLE_DEVICES"]; got != "void" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want void", got)
	}
	if specs := s.cdiSpecsOf(t, string(claim.UID)); len(specs) == 0 {
		t.Errorf("no CDI spec names prepared claim %s", claim.UID)
	}
	if !s.checkpointNames(t, string(claim.UID)) {
		t.Errorf("the plugin's checkpoint does not name prepared claim %s", claim.UID)
	}
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
}

// TestNodeSharedClaim: two pods share one claim (a ResourceClaim both name): both run and see
// the same GPU; kubelet unprepares only when the second pod is gone.
func TestNodeSharedClaim(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claim(ctx, t, ns, "shared", "gpu.nvidia.com", 1)
	ref := corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To("shared")}
	first := s.runPod(ctx, t, workloadPod(ns, "first", ref, "main"))
	second := s.runPod(ctx, t, workloadPod(ns, "second", ref, "main"))
	claim, devs := s.allocatedDevices(ctx, t, first, "gpu")
	for _, p := range []*corev1.Pod{first, second} {
		s.checkGPUNodes(ctx, t, p, devs, "main")
	}
	s.deletePod(ctx, t, first)
	if specs := s.cdiSpecsOf(t, string(claim.UID)); len(specs) == 0 {
		t.Errorf("the claim's CDI spec is gone while pod %s still uses it", second.Name)
	}
	s.deletePod(ctx, t, second)
	s.waitUnprepared(ctx, t, string(claim.UID))
}

// TestNodeTwoContainers: both containers of a pod that name the claim see its GPU.
func TestNodeTwoContainers(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claimTemplate(ctx, t, ns, "one-gpu", "gpu.nvidia.com", 1)
	pod := s.runPod(ctx, t, workloadPod(ns, "two", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}, "a", "b"))
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	s.checkGPUNodes(ctx, t, pod, devs, "a", "b")
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
}

// waitUnprepared waits until neither a CDI spec nor the plugin's checkpoint names claim uid
// (kubelet's NodeUnprepareResources runs after the pod's containers are gone, a moment before
// or after the pod object is).
func (s *Suite) waitUnprepared(ctx context.Context, t *testing.T, uid string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		specs := s.cdiSpecsOf(t, uid)
		inCheckpoint := s.checkpointNames(t, uid)
		if len(specs) == 0 && !inCheckpoint {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s 30 s after its pod is gone: CDI specs %v, in the checkpoint: %v", uid, specs, inCheckpoint)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkpointNames reports whether the plugin's checkpoint (checkpoint.json in its plugin
// directory, the chart's state directory) mentions uid anywhere.
func (s *Suite) checkpointNames(t *testing.T, uid string) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.Node.Kubelet.RootDir, "plugins", driverName, "checkpoint.json"))
	if err != nil {
		t.Fatalf("read the plugin's checkpoint: %v", err)
	}
	return strings.Contains(string(data), uid)
}

// TestNodeExtendedResource: with the chart's extended-resource classes on, an unchanged pod that
// asks for nvidia.com/gpu: 1, as written for NVIDIA's device plugin, gets a GPU through DRA: the
// scheduler makes a claim for it, kubelet prepares it, and the container sees one GPU.
func TestNodeExtendedResource(t *testing.T) {
	ctx := context.Background()
	s := suite
	s.reinstall(ctx, t, map[string]any{"extendedResources": map[string]any{"enabled": true}})
	ns := s.namespace(ctx, t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "device-plugin-style", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: nodeName}, TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers: []corev1.Container{{Name: "main", Image: workloadImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}},
		},
	}
	pod = s.runPod(ctx, t, pod)
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName == "" {
		t.Fatalf("pod status names no extended-resource claim: %+v", pod.Status)
	}
	claim, err := s.Client.ResourceV1().ResourceClaims(ns).Get(ctx, st.ResourceClaimName, metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: %v (%+v)", st.ResourceClaimName, err, claim)
	}
	dev := claim.Status.Allocation.Devices.Results[0].Device
	if diff := cmp.Diff(s.wantGPUNodes(ctx, t, dev), seen(s.report(ctx, t, pod, "main").Devices)); diff != "" {
		t.Errorf("device nodes (-want +got):\n%s", diff)
	}
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
}
