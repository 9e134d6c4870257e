package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// cdiKind is the CDI vendor/class of per-claim devices (DESIGN.md, compatibility contract).
const cdiKind = "k8s.gpu.nvidia.com/claim"

// podClaims returns the ResourceClaims of a pod, in the order of spec.resourceClaims, once
// they all exist (template claims are created by the controller-manager).
func podClaims(ctx context.Context, pod *corev1.Pod) ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	for _, pc := range pod.Spec.ResourceClaims {
		name := ptr.Deref(pc.ResourceClaimName, "")
		if name == "" {
			for _, st := range pod.Status.ResourceClaimStatuses {
				if st.Name == pc.Name {
					name = ptr.Deref(st.ResourceClaimName, "")
				}
			}
		}
		if name == "" {
			return nil, fmt.Errorf("pod %s: claim %s not created yet", pod.Name, pc.Name)
		}
		c, err := suite.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// reservedFor reports whether the claim is allocated and reserved for the pod.
func reservedFor(c *resourceapi.ResourceClaim, pod *corev1.Pod) bool {
	if c.Status.Allocation == nil {
		return false
	}
	return slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID })
}

// ScheduledPod is a pod the scheduler bound, with its allocated claims.
type ScheduledPod struct {
	Pod    *corev1.Pod
	Claims []*resourceapi.ResourceClaim
}

// waitScheduled waits until namespace ns has want pods, all bound to node with every claim
// allocated and reserved for them.
func waitScheduled(ctx context.Context, ns string, want int, node string) ([]ScheduledPod, error) {
	var out []ScheduledPod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := suite.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		out, last = nil, ""
		if len(pods.Items) != want {
			last = fmt.Sprintf("%d of %d pods exist", len(pods.Items), want)
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName != node {
				last = fmt.Sprintf("pod %s not bound to %s (node %q, conditions %s)", p.Name, node, p.Spec.NodeName, podConditions(p))
				return false, nil
			}
			claims, err := podClaims(ctx, p)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			for _, c := range claims {
				if !reservedFor(c, p) {
					last = fmt.Sprintf("claim %s not allocated and reserved for pod %s", c.Name, p.Name)
					return false, nil
				}
			}
			out = append(out, ScheduledPod{Pod: p, Claims: claims})
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %s: %w", ns, last, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod.Name < out[j].Pod.Name })
	return out, nil
}

// waitUnschedulable waits until namespace ns has want pods and the scheduler reported each of
// them Unschedulable; it returns the scheduler's messages by pod.
func waitUnschedulable(ctx context.Context, ns string, want int) (map[string]string, error) {
	msgs := map[string]string{}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := suite.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != want {
			last = fmt.Sprintf("%d of %d pods exist", len(pods.Items), want)
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("pod %s was scheduled to %s", p.Name, p.Spec.NodeName)
			}
			c := podCondition(&p, corev1.PodScheduled)
			if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
				last = fmt.Sprintf("pod %s: no Unschedulable condition yet (%s)", p.Name, podConditions(&p))
				return false, nil
			}
			msgs[p.Name] = c.Message
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %s: %w", ns, last, err)
	}
	return msgs, nil
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func podConditions(p *corev1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s %s %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}

// kubeletClaims are the claims of pods as kubelet names them in its calls.
func kubeletClaims(claims ...*resourceapi.ResourceClaim) []fakekubelet.Claim {
	var out []fakekubelet.Claim
	for _, c := range claims {
		out = append(out, fakekubelet.Claim{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID)})
	}
	return out
}

// prepare prepares claims through the node's DRA socket and fails on any error.
func (n *TestNode) prepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodePrepareResourcesResponse, error) {
	kc := kubeletClaims(claims...)
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second) // kubelet's per-call timeout
	defer cancel()
	resp, err := n.Kubelet.Prepare(ctx, kc...)
	return resp, fakekubelet.PrepareErrors(resp, err, kc...)
}

// unprepare unprepares claims through the node's DRA socket and fails on any error.
func (n *TestNode) unprepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) error {
	kc := kubeletClaims(claims...)
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	resp, err := n.Kubelet.Unprepare(ctx, kc...)
	return fakekubelet.UnprepareErrors(resp, err, kc...)
}

// checkPrepared checks a prepare response against the claims' allocations and the node's
// published devices: every allocated device of this driver is returned with the request it
// serves and exactly one CDI ID of the claim kind; the IDs inject into an OCI spec with the CDI
// library from the node's CDI directory; the container then gets the device node of each
// allocated GPU (the device's minor attribute, or its parent's index for a MIG device, plus a
// MIG capability node) and no other GPU's.
func (n *TestNode) checkPrepared(resp *drapbv1.NodePrepareResourcesResponse, claims []*resourceapi.ResourceClaim, pool map[string]resourceapi.Device) error {
	for _, c := range claims {
		r := resp.Claims[string(c.UID)]
		want := map[string]string{}
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver == driverName {
				want[res.Device] = strings.SplitN(res.Request, "/", 2)[0]
			}
		}
		got := map[string]string{}
		var ids []string
		for _, d := range r.Devices {
			if d.PoolName != n.Spec.Name {
				return fmt.Errorf("claim %s: device %s from pool %q, want %q", c.Name, d.DeviceName, d.PoolName, n.Spec.Name)
			}
			got[d.DeviceName] = strings.Join(d.RequestNames, ",")
			if len(d.CdiDeviceIds) != 1 || !strings.HasPrefix(d.CdiDeviceIds[0], cdiKind+"="+string(c.UID)+"-") {
				return fmt.Errorf("claim %s: device %s has CDI IDs %v, want one %s=%s-<device>", c.Name, d.DeviceName, d.CdiDeviceIds, cdiKind, c.UID)
			}
			ids = append(ids, d.CdiDeviceIds...)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("claim %s: prepared devices (device: request) %v, allocated %v", c.Name, got, want)
		}
		if err := n.checkInjection(c.Name, ids, want, pool); err != nil {
			return err
		}
	}
	return nil
}

func (n *TestNode) checkInjection(claim string, ids []string, devices map[string]string, pool map[string]resourceapi.Device) error {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.Driver.ArgValue("--cdi-root")), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("claim %s: CDI cache: %w", claim, err)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		return fmt.Errorf("claim %s: inject %v (unresolved %v): %w", claim, ids, unresolved, err)
	}
	nodes := map[string]bool{}
	for _, d := range spec.Linux.Devices {
		nodes[d.Path] = true
	}
	wantGPUs := map[string]bool{}
	for name := range devices {
		dev, ok := pool[name]
		if !ok {
			return fmt.Errorf("claim %s: device %s is not in the node's slices", claim, name)
		}
		minor, mig := gpuMinor(dev)
		wantGPUs["/dev/nvidia"+strconv.FormatInt(minor, 10)] = true
		if mig && !slices.ContainsFunc(spec.Linux.Devices, func(d oci.LinuxDevice) bool { return strings.HasPrefix(d.Path, "/dev/nvidia-caps/") }) {
			return fmt.Errorf("claim %s: MIG device %s injected no /dev/nvidia-caps node: %v", claim, name, keys(nodes))
		}
	}
	for path := range nodes {
		if isGPUNode(path) && !wantGPUs[path] {
			return fmt.Errorf("claim %s: the container gets %s, which was not allocated (allocated: %v)", claim, path, keys(wantGPUs))
		}
	}
	for path := range wantGPUs {
		if !nodes[path] {
			return fmt.Errorf("claim %s: the container lacks %s (has %v)", claim, path, keys(nodes))
		}
	}
	return nil
}

// gpuMinor is the /dev/nvidia<N> minor of a published device: its minor attribute, or the
// parentIndex of a MIG device (fake machines number minors like indexes).
func gpuMinor(d resourceapi.Device) (int64, bool) {
	if v := d.Attributes["minor"].IntValue; v != nil {
		return *v, false
	}
	return ptr.Deref(d.Attributes["parentIndex"].IntValue, -1), true
}

func isGPUNode(path string) bool {
	rest, ok := strings.CutPrefix(path, "/dev/nvidia")
	if !ok {
		return false
	}
	_, err := strconv.Atoi(rest)
	return err == nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// deletePods deletes pods with grace period 0: with no kubelet they would never terminate.
func deletePods(ctx context.Context, ns string, names ...string) error {
	for _, name := range names {
		err := suite.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// deleteNamespace deletes everything in ns (workload controllers first, then pods at once) and
// waits until the namespace is gone, so its claims' devices are free again.
func deleteNamespace(ctx context.Context, ns string) error {
	c := suite.Client
	bg := metav1.DeletePropagationBackground
	if err := c.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := c.AppsV1().ReplicaSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		// Pods created by a ReplicaSet between the deletions above are removed too.
		_ = c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		_, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// newWorkloadNamespace creates a namespace whose pods the PodNodeSelector admission plugin
// pins to node, so manifests are applied exactly as written.
func newWorkloadNamespace(ctx context.Context, name, node string) error {
	return framework.CreateNamespace(ctx, suite.Client, name, map[string]string{
		"scheduler.alpha.kubernetes.io/node-selector": corev1.LabelHostname + "=" + node,
	})
}

// deviceStatusOf waits until the claim's status.devices entries of our driver satisfy done
// (the driver writes them in the background after prepare and unprepare) and returns them.
func deviceStatusOf(ctx context.Context, claim *resourceapi.ResourceClaim, what string, done func([]resourceapi.AllocatedDeviceStatus) bool) ([]resourceapi.AllocatedDeviceStatus, error) {
	var ours []resourceapi.AllocatedDeviceStatus
	// As long as kubelet waits for a prepare: on a loaded CI machine the API server is slow.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := suite.Client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ours = slices.DeleteFunc(slices.Clone(c.Status.Devices), func(d resourceapi.AllocatedDeviceStatus) bool { return d.Driver != driverName })
		return done(ours), nil
	})
	if err != nil {
		return ours, fmt.Errorf("claim %s/%s: %s: %w (status.devices of %s: %+v)", claim.Namespace, claim.Name, what, err, driverName, ours)
	}
	return ours, nil
}
