package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/kubenode"
	"github.com/gpudra/gpudra/test/e2e/framework/kubenode/report"
)

const (
	// cdCommand is the ComputeDomain driver's program in the driver image.
	cdCommand = "compute-domain-driver"
	// cdClique is the fake tray's NVLink clique (computeDomains.fakeClique).
	cdClique = "5b0c7f6e-2a41-4d3b-9e8f-1c2d3e4f5a6b.3"
)

// TestNodeComputeDomain (issue 31): with computeDomains on, the ComputeDomain plugin serving its
// fake GB200 tray (gb200-nvl4, in cdClique) and the suite's fake driver root holding the fake
// nvidia-imex (the GPU plugin keeps the suite's fake machine: its fake host state is bound to
// that machine's GPUs and refuses another), a one-node ComputeDomain and a pod naming its channel
// template (NVIDIA's "IMEX channel injection" shape): the controller makes the template and the
// IMEX daemon DaemonSet and labels the node; the daemon pod runs on the real kubelet with its
// daemon claim prepared by the plugin and reports the node Ready; the pod runs and its container
// sees /dev/nvidia-caps-imex-channels/channel0 (the channel major of the root's proc/devices)
// and NVIDIA_VISIBLE_DEVICES=void. Deleting the pod and the domain leaves no daemon pod, no
// node label and no CDI spec of the driver.
func TestNodeComputeDomain(t *testing.T) {
	ctx := context.Background()
	s := suite
	s.applyComputeDomainCRD(ctx, t)
	s.daemonsReachAPIServer(ctx, t)
	s.reinstall(ctx, t, map[string]any{"computeDomains": map[string]any{"enabled": true, "fakeClique": cdClique}})
	// Before the suite's chart is restored (cleanups run last first).
	t.Cleanup(func() { s.removeComputeDomainParts(t) })
	s.waitComponentReady(ctx, t, "compute-domain-plugin", "plugin")
	s.waitComponentReady(ctx, t, "compute-domain-controller", "controller")
	ns := s.namespace(ctx, t)
	domain := s.createComputeDomain(ctx, t, ns, "imex-channel-injection", "imex-channel-0")
	pod := workloadPod(ns, "imex-channel-injection", corev1.PodResourceClaim{Name: "imex-channel-0", ResourceClaimTemplateName: ptr.To("imex-channel-0")}, "ctr")
	pod.Spec.NodeSelector = nil // the channel's allocation puts it on a node of the domain's clique
	if _, err := s.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	daemon := s.imexDaemonPod(ctx, t, string(domain.GetUID()))
	s.waitDomainReady(ctx, t, ns, domain.GetName(), daemon)
	running := s.waitRunning(ctx, t, ns, pod.Name)
	r := s.report(ctx, t, running, "ctr")
	checkChannel(t, r)
	claim, _ := s.allocatedDevices(ctx, t, running, "imex-channel-0")

	s.deletePod(ctx, t, running)
	if err := s.Applier.Delete(ctx, ns, 0, domain); err != nil {
		t.Fatal(err)
	}
	s.waitComputeDomainGone(ctx, t, daemon, string(claim.UID))
}

// checkChannel checks that the container has channel 0 as a character device of the fake
// root's major and no GPU (NVIDIA_VISIBLE_DEVICES=void).
func checkChannel(t *testing.T, r report.Report) {
	t.Helper()
	want := report.Device{Path: computedomain.ChannelDevicePath(0), Type: "c", Major: kubenode.IMEXChannelMajor, Minor: 0}
	var got []report.Device
	for _, d := range r.Devices {
		if strings.HasPrefix(d.Path, computedomain.ChannelDevDir+"/") {
			d.Open = "" // no driver of the major: ENXIO, not checked
			got = append(got, d)
		}
	}
	if diff := cmp.Diff([]report.Device{want}, got); diff != "" {
		t.Errorf("IMEX channel nodes the container sees (-want +got):\n%s\nall devices: %v", diff, r.DevicePaths())
	}
	if v, ok := r.Env["NVIDIA_VISIBLE_DEVICES"]; !ok || v != "void" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q (set %v), want void", v, ok)
	}
}

// applyComputeDomainCRD applies the chart's crds/ as `helm install` does (the tier's renderer
// renders templates only). Helm never deletes a CRD; neither does the test.
func (s *Suite) applyComputeDomainCRD(ctx context.Context, t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.Repo, chartPath, "crds", "resource.nvidia.com_computedomains.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crds, err := framework.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Applier.Apply(ctx, "", crds...); err != nil {
		t.Fatal(err)
	}
}

// daemonsReachAPIServer gives the IMEX daemon pods the forwarder's address as the API
// server's, as adaptToNode does for the chart's pods: the controller makes their DaemonSet, so
// a MutatingAdmissionPolicy sets it when a daemon pod (labelled with its domain) is created.
// Removed when the test ends.
func (s *Suite) daemonsReachAPIServer(ctx context.Context, t *testing.T) {
	t.Helper()
	var env []string
	probe := &corev1.PodSpec{Containers: []corev1.Container{{}}}
	if err := s.adaptToNode(probe); err != nil {
		t.Fatal(err)
	}
	for _, e := range probe.Containers[0].Env {
		env = append(env, fmt.Sprintf("Object.spec.containers.env{name: %q, value: %q}", e.Name, e.Value))
	}
	const name = "node-tier-imex-daemons-api-server"
	policy := &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: computedomain.NodeLabel, Operator: metav1.LabelSelectorOpExists}}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}},
			},
			Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionv1.ApplyConfiguration{
				Expression: "Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name, env: [" + strings.Join(env, ", ") + "]})}}",
			}}},
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
			FailurePolicy:      ptr.To(admissionv1.Fail),
		},
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name, MatchResources: &admissionv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: releaseNamespace}}}},
	}
	mutating := s.Client.AdmissionregistrationV1()
	if _, err := mutating.MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mutating.MutatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := mutating.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mutating.MutatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// removeComputeDomainParts waits for the IMEX daemon pods to go (the test's namespace, deleted
// first, takes its domains along), then deletes what the chart installs only with
// computeDomains on (the tier applies, it does not prune as `helm upgrade` would) and the
// ComputeDomain plugin's slices, so that the next tests find the suite's chart alone.
func (s *Suite) removeComputeDomainParts(t *testing.T) {
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: computedomain.NodeLabel})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("IMEX daemon pods not gone: %v", err)
	}
	with, err := framework.RenderChart(filepath.Join(s.Repo, chartPath), s.Bins.KubernetesVersion, framework.Release{Name: releaseName, Namespace: releaseNamespace,
		Values: s.chartValues(map[string]any{"computeDomains": map[string]any{"enabled": true}})})
	if err != nil {
		t.Errorf("render the chart with ComputeDomains: %v", err)
		return
	}
	without, err := framework.RenderChart(filepath.Join(s.Repo, chartPath), s.Bins.KubernetesVersion, framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: s.chartValues(nil)})
	if err != nil {
		t.Errorf("render the suite's chart: %v", err)
		return
	}
	keep := map[string]bool{}
	for _, o := range without {
		keep[o.GetKind()+"/"+o.GetName()] = true
	}
	var extra []*unstructured.Unstructured
	for _, o := range with {
		if !keep[o.GetKind()+"/"+o.GetName()] {
			extra = append(extra, o)
		}
	}
	if err := s.Applier.Delete(ctx, releaseNamespace, 0, extra...); err != nil {
		t.Errorf("remove the ComputeDomain parts of the chart: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component in (compute-domain-plugin, compute-domain-controller)"})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("ComputeDomain plugin and controller pods not gone: %v", err)
	}
	err = s.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: "spec.driver=" + computedomain.DriverName})
	if err != nil {
		t.Errorf("remove the ComputeDomain plugin's slices: %v", err)
	}
}

// waitComponentReady waits for the one pod of the chart's component (app.kubernetes.io/component)
// on the node to be Running and Ready; its container's log ends the error otherwise.
func (s *Suite) waitComponentReady(ctx context.Context, t *testing.T, component, container string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
		if err != nil || len(pods.Items) != 1 {
			last = fmt.Sprintf("%d pods (%v)", len(pods.Items), err)
			return false, nil
		}
		p := &pods.Items[0]
		last = fmt.Sprintf("%s: phase %s, %s", p.Name, p.Status.Phase, containerStates(p))
		return p.Status.Phase == corev1.PodRunning && podReady(p), nil
	})
	if err != nil {
		t.Fatalf("%s not ready: %v (%s)\nevents:\n%s%s", component, err, last, s.events(ctx, releaseNamespace), s.componentLogTails(ctx, component, container))
	}
}

// createComputeDomain creates a one-node ComputeDomain whose channel template is named
// template, retrying while the new CRD is not yet served.
func (s *Suite) createComputeDomain(ctx context.Context, t *testing.T, ns, name, template string) *unstructured.Unstructured {
	t.Helper()
	objs, err := framework.DecodeObjects([]byte(`
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: ` + name + `
spec:
  numNodes: 1
  channel:
    resourceClaimTemplate:
      name: ` + template + `
`))
	if err != nil {
		t.Fatal(err)
	}
	var applyErr error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		applyErr = s.Applier.Apply(ctx, ns, objs[0])
		return applyErr == nil, nil
	})
	if err != nil {
		t.Fatalf("create ComputeDomain %s/%s: %v", ns, name, applyErr)
	}
	got, err := s.Applier.Get(ctx, ns, objs[0])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// imexDaemonPod waits for the one IMEX daemon pod of domain uid on the node to be Running and
// Ready, and for the node to carry the domain's label.
func (s *Suite) imexDaemonPod(ctx context.Context, t *testing.T, uid string) *corev1.Pod {
	t.Helper()
	var last string
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: computedomain.NodeLabel + "=" + uid, FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil || len(pods.Items) != 1 {
			last = fmt.Sprintf("%d daemon pods on %s (%v); %s", len(pods.Items), nodeName, err, s.daemonSetState(ctx))
			return false, nil
		}
		pod = &pods.Items[0]
		last = fmt.Sprintf("%s: phase %s, %s", pod.Name, pod.Status.Phase, containerStates(pod))
		return pod.Status.Phase == corev1.PodRunning && podReady(pod), nil
	})
	if err != nil {
		t.Fatalf("IMEX daemon pod of domain %s not ready: %v (%s)\nevents in %s:\n%s%s%s%s", uid, err, last, releaseNamespace,
			s.events(ctx, releaseNamespace), s.containerLogTail(pod, "imex"),
			s.componentLogTails(ctx, "compute-domain-plugin", "plugin"), s.componentLogTails(ctx, "compute-domain-controller", "controller"))
	}
	node, err := s.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Labels[computedomain.NodeLabel]; got != uid {
		t.Errorf("node label %s=%q, want the domain's UID %s", computedomain.NodeLabel, got, uid)
	}
	return pod
}

// componentLogTails are the ends of the logs of container in the chart's pods of component
// (app.kubernetes.io/component), for errors.
func (s *Suite) componentLogTails(ctx context.Context, component, container string) string {
	pods, err := s.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
	if err != nil {
		return "\n" + err.Error()
	}
	var b strings.Builder
	for i := range pods.Items {
		fmt.Fprintf(&b, "\npod %s:%s", pods.Items[i].Name, s.containerLogTail(&pods.Items[i], container))
	}
	return b.String()
}

// containerLogTail is the end of a container's log, for errors ("" without a pod).
func (s *Suite) containerLogTail(pod *corev1.Pod, container string) string {
	if pod == nil {
		return ""
	}
	log, err := s.Node.Kubelet.ContainerLog(pod, container)
	if err != nil {
		return fmt.Sprintf("\n%s log: %v", container, err)
	}
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return fmt.Sprintf("\nlast lines of %s's log:\n  %s", container, strings.Join(lines[max(0, len(lines)-15):], "\n  "))
}

// waitDomainReady waits for the domain's status.status to be Ready; the error ends with the
// log of its IMEX daemon pod, daemon.
func (s *Suite) waitDomainReady(ctx context.Context, t *testing.T, ns, name string, daemon *corev1.Pod) {
	t.Helper()
	var status string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("resource.nvidia.com/v1beta1")
		u.SetKind("ComputeDomain")
		u.SetName(name)
		got, err := s.Applier.Get(ctx, ns, u)
		if err != nil {
			return false, nil
		}
		status, _, _ = unstructured.NestedString(got.Object, "status", "status")
		return status == "Ready", nil
	})
	if err != nil {
		t.Fatalf("ComputeDomain %s/%s status %q, want Ready: %v%s", ns, name, status, err, s.containerLogTail(daemon, "imex"))
	}
}

// waitRunning waits for the pod to be Running and Ready.
func (s *Suite) waitRunning(ctx context.Context, t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return p.Status.Phase == corev1.PodRunning && podReady(p), nil
	})
	if err != nil {
		state := ""
		if last != nil {
			state = fmt.Sprintf("phase %s, %s", last.Status.Phase, containerStates(last))
		}
		t.Fatalf("pod %s/%s not running: %v (%s)\nevents:\n%s", ns, name, err, state, s.events(ctx, ns))
	}
	return last
}

// waitComputeDomainGone waits until the domain's daemon pod is gone, the node has no domain
// label and no CDI spec of the ComputeDomain driver is left (the channel claim's, channelClaim,
// and the daemon claim's).
func (s *Suite) waitComputeDomainGone(ctx context.Context, t *testing.T, daemon *corev1.Pod, channelClaim string) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = nil
		if _, err := s.Client.CoreV1().Pods(daemon.Namespace).Get(ctx, daemon.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "daemon pod "+daemon.Name)
		}
		node, err := s.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if v, ok := node.Labels[computedomain.NodeLabel]; ok {
			left = append(left, "node label "+computedomain.NodeLabel+"="+v)
		}
		left = append(left, s.computeDomainSpecs(t)...)
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("after the pod and the domain are deleted: %v; left: %v (the channel claim was %s)", err, left, channelClaim)
	}
}

// computeDomainSpecs lists the CDI spec files of the ComputeDomain driver on the node.
func (s *Suite) computeDomainSpecs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, name := range s.cdiSpecsOf(t, computedomain.DriverName) {
		out = append(out, "CDI spec "+name)
	}
	return out
}
