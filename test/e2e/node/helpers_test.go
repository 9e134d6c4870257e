package node

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/sharing/mpspod"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/kubenode/report"
)

func hostPort(rawURL string) (string, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", err
	}
	return u.Hostname(), u.Port(), nil
}

// waitPluginReady waits until every plugin pod on the node is Running and Ready (the chart's
// probes passed) and the node's pool has slices.
func (s *Suite) waitPluginReady(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.pluginPods(ctx)
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		if len(pods) == 0 {
			last = "no plugin pod on the node; " + s.daemonSetState(ctx)
			return false, nil
		}
		for _, p := range pods {
			if p.DeletionTimestamp != nil || !podReady(&p) {
				last = fmt.Sprintf("plugin pod %s: phase %s, %s", p.Name, p.Status.Phase, containerStates(&p))
				return false, nil
			}
		}
		if done, state := s.rolledOut(ctx); !done {
			last = state
			return false, nil
		}
		slices, err := s.nodeSlices(ctx)
		if err != nil || len(slices) == 0 {
			last = fmt.Sprintf("no ResourceSlices of %s for node %s (%v)", driverName, nodeName, err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		bg := context.WithoutCancel(ctx)
		return fmt.Errorf("plugin not ready (last: %s): %w\n%s\nevents in %s:\n%s\nkubelet log %s", last, err, s.daemonSetState(bg), releaseNamespace, s.events(bg, releaseNamespace), s.Node.Kubelet.Proc.LogFile)
	}
	return nil
}

// rolledOut says whether the chart's DaemonSet runs its current pod template on the node.
func (s *Suite) rolledOut(ctx context.Context) (bool, string) {
	dss, err := s.Client.AppsV1().DaemonSets(releaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	for _, ds := range dss.Items {
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled != st.DesiredNumberScheduled ||
			st.NumberAvailable != st.DesiredNumberScheduled || st.CurrentNumberScheduled != st.DesiredNumberScheduled {
			return false, fmt.Sprintf("DaemonSet %s rolling out (generation %d, observed %d, desired %d, updated %d, available %d)",
				ds.Name, ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberAvailable)
		}
	}
	return true, ""
}

// daemonSetState says what the chart's DaemonSets report and what the node looks like, for
// errors.
func (s *Suite) daemonSetState(ctx context.Context) string {
	var b strings.Builder
	dss, err := s.Client.AppsV1().DaemonSets(releaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, ds := range dss.Items {
		fmt.Fprintf(&b, "DaemonSet %s: desired %d, current %d, ready %d, conditions %v; ", ds.Name,
			ds.Status.DesiredNumberScheduled, ds.Status.CurrentNumberScheduled, ds.Status.NumberReady, ds.Status.Conditions)
	}
	node, err := s.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return b.String() + err.Error()
	}
	fmt.Fprintf(&b, "node labels %v, taints %v", node.Labels, node.Spec.Taints)
	return b.String()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func containerStates(p *corev1.Pod) string {
	var s []string
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s = append(s, fmt.Sprintf("%s waiting (%s: %s)", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message))
		case c.State.Terminated != nil:
			s = append(s, fmt.Sprintf("%s terminated (%s, exit %d: %s)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode, c.State.Terminated.Message))
		default:
			s = append(s, fmt.Sprintf("%s running (ready %v, restarts %d)", c.Name, c.Ready, c.RestartCount))
		}
	}
	return strings.Join(s, "; ")
}

// nodeSlices are the driver's ResourceSlices of the node.
func (s *Suite) nodeSlices(ctx context.Context) ([]resourceapi.ResourceSlice, error) {
	l, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + nodeName + "," + resourceapi.ResourceSliceSelectorDriver + "=" + driverName})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// device returns the published device named name of the node's pool.
func (s *Suite) device(ctx context.Context, t *testing.T, name string) resourceapi.Device {
	t.Helper()
	slices, err := s.nodeSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range slices {
		for _, d := range sl.Spec.Devices {
			if d.Name == name {
				return d
			}
		}
	}
	t.Fatalf("device %s is not published for node %s", name, nodeName)
	return resourceapi.Device{}
}

// namespace creates a fresh namespace for a test and deletes it at the end.
func (s *Suite) namespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-")
	if err := framework.CreateNamespace(ctx, s.Client, name, nil); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitForServiceAccount(ctx, s.Client, name, "default"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// claimSpec asks for count devices of class in one request named "gpu".
func claimSpec(class string, count int64, config ...resourceapi.DeviceClaimConfiguration) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Count: count, AllocationMode: resourceapi.DeviceAllocationModeExactCount}}},
		Config:   config,
	}}
}

// claimTemplate creates a ResourceClaimTemplate of claimSpec(class, count, config...).
func (s *Suite) claimTemplate(ctx context.Context, t testing.TB, ns, name, class string, count int64, config ...resourceapi.DeviceClaimConfiguration) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec(class, count, config...)},
	}
	if _, err := s.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claim creates a ResourceClaim of claimSpec(class, count, config...).
func (s *Suite) claim(ctx context.Context, t *testing.T, ns, name, class string, count int64, config ...resourceapi.DeviceClaimConfiguration) {
	t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: claimSpec(class, count, config...)}
	if _, err := s.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// workloadPod is a pod of containers running the workload image on the node's pod network,
// each container with access to the pod's claim named "gpu".
func workloadPod(ns, name string, claim corev1.PodResourceClaim, containers ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: nodeName},
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			ResourceClaims:                []corev1.PodResourceClaim{claim},
		},
	}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: c, Image: workloadImage, ImagePullPolicy: corev1.PullNever,
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim.Name}}},
		})
	}
	return pod
}

// runPod creates pod and waits for it to be Running with every container started.
func (s *Suite) runPod(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := s.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		last, err = s.Client.CoreV1().Pods(pod.Namespace).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if last.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod failed: %s", containerStates(last))
		}
		return last.Status.Phase == corev1.PodRunning && podReady(last), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not running: %v\nphase %s, %s\nevents:\n%s\nkubelet log %s", pod.Namespace, pod.Name, err, last.Status.Phase, containerStates(last), s.events(ctx, pod.Namespace), s.Node.Kubelet.Proc.LogFile)
	}
	return last
}

// events returns the namespace's events, one per line.
func (s *Suite) events(ctx context.Context, ns string) string {
	l, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range l.Items {
		fmt.Fprintf(&b, "  %s %s/%s: %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// report waits for container's report line in its log and returns it.
func (s *Suite) report(ctx context.Context, t *testing.T, pod *corev1.Pod, container string) report.Report {
	t.Helper()
	var r report.Report
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var log string
		log, last = s.Node.Kubelet.ContainerLog(pod, container)
		if last != nil {
			return false, nil
		}
		r, last = report.Parse(log)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("container %s of pod %s/%s: no report (%v): %v", container, pod.Namespace, pod.Name, last, err)
	}
	return r
}

// deletePod deletes pod and waits until it is gone: kubelet has stopped its containers and
// unprepared its claims by then (a claim's last pod gone is when kubelet calls
// NodeUnprepareResources).
func (s *Suite) deletePod(ctx context.Context, t testing.TB, pod *corev1.Pod) {
	t.Helper()
	if err := s.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not gone: %v", pod.Namespace, pod.Name, err)
	}
}

// allocatedDevices returns the devices of the pod's claim named claimName, as allocated.
func (s *Suite) allocatedDevices(ctx context.Context, t *testing.T, pod *corev1.Pod, claimName string) (*resourceapi.ResourceClaim, []string) {
	t.Helper()
	var name string
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == claimName && st.ResourceClaimName != nil {
			name = *st.ResourceClaimName
		}
	}
	for _, c := range pod.Spec.ResourceClaims {
		if c.Name == claimName && c.ResourceClaimName != nil {
			name = *c.ResourceClaimName
		}
	}
	if name == "" {
		t.Fatalf("pod %s has no claim %s in its status", pod.Name, claimName)
	}
	claim, err := s.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil {
		t.Fatalf("claim %s is not allocated", name)
	}
	var devs []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		devs = append(devs, r.Device)
	}
	sort.Strings(devs)
	return claim, devs
}

// cdiSpecsOf lists the CDI spec files in the node's CDI directory that mention uid (a claim's
// UID, or any text: a driver name).
func (s *Suite) cdiSpecsOf(t *testing.T, uid string) []string {
	t.Helper()
	entries, err := os.ReadDir(s.Node.CDIDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(s.Node.CDIDir, e.Name()))
		if err == nil && strings.Contains(string(data), uid) {
			out = append(out, e.Name())
		}
	}
	return out
}

// cdiMounts returns the host paths that claim uid's CDI specs mount at containerPath, from the
// specs' container edits and their devices' edits.
func (s *Suite) cdiMounts(t *testing.T, uid, containerPath string) []string {
	t.Helper()
	var out []string
	for _, name := range s.cdiSpecsOf(t, uid) {
		data, err := os.ReadFile(filepath.Join(s.Node.CDIDir, name))
		if err != nil {
			t.Fatal(err)
		}
		var spec cdispec.Spec
		if err := yaml.Unmarshal(data, &spec); err != nil {
			t.Fatalf("CDI spec %s: %v", name, err)
		}
		edits := []cdispec.ContainerEdits{spec.ContainerEdits}
		for _, d := range spec.Devices {
			edits = append(edits, d.ContainerEdits)
		}
		for _, e := range edits {
			for _, m := range e.Mounts {
				if m.ContainerPath == containerPath {
					out = append(out, m.HostPath)
				}
			}
		}
	}
	return out
}

// intAttr returns a device's int attribute of the driver's domain.
func intAttr(d resourceapi.Device, name string) int64 {
	a, ok := d.Attributes[resourceapi.QualifiedName(driverName+"/"+name)]
	if !ok {
		a = d.Attributes[resourceapi.QualifiedName(name)]
	}
	if a.IntValue == nil {
		return -1
	}
	return *a.IntValue
}

// strAttr returns a device's string attribute of the driver's domain.
func strAttr(d resourceapi.Device, name string) string {
	a := d.Attributes[resourceapi.QualifiedName(driverName+"/"+name)]
	if a.StringValue == nil {
		a = d.Attributes[resourceapi.QualifiedName(name)]
	}
	if a.StringValue == nil {
		return ""
	}
	return *a.StringValue
}

// mpsDaemonPod waits for the one MPS control daemon pod of daemon id on the node (found by its
// labels, not by its name) to be Running and Ready and returns it.
func (s *Suite) mpsDaemonPod(ctx context.Context, t *testing.T, id string) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	var found int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.mpsDaemonPods(ctx, id)
		if err != nil || len(pods) == 0 {
			return false, nil
		}
		found, last = len(pods), &pods[0]
		return found == 1 && last.Status.Phase == corev1.PodRunning && podReady(last), nil
	})
	if err != nil {
		state := "never seen"
		if last != nil {
			state = fmt.Sprintf("%d pods; %s: node %s, phase %s, %s", found, last.Name, last.Spec.NodeName, last.Status.Phase, containerStates(last))
		}
		t.Fatalf("MPS daemon pod of %s not running: %v (%s)\nevents:\n%s", id, err, state, s.events(ctx, releaseNamespace))
	}
	if last.Name != mpspod.PodName(nodeName, id) {
		t.Errorf("MPS daemon pod %s, want the name %s", last.Name, mpspod.PodName(nodeName, id))
	}
	return last
}

// mpsDaemonPods lists the MPS control daemon pods of daemon id on the node, by their labels.
func (s *Suite) mpsDaemonPods(ctx context.Context, id string) ([]corev1.Pod, error) {
	l, err := s.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: mpspod.DaemonLabel + "=" + id + "," + mpspod.NodeLabel + "=" + nodeName})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// waitPluginGone waits until the plugin pods of before are gone (deleted, not just terminating).
func (s *Suite) waitPluginGone(ctx context.Context, before []corev1.Pod) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range before {
			if _, err := s.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// restarts is the sum of the restart counts of the pod's containers.
func restarts(p *corev1.Pod) int {
	n := 0
	for _, c := range p.Status.ContainerStatuses {
		n += int(c.RestartCount)
	}
	return n
}
