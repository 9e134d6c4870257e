package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/sharing/sharingtest"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// NodeSpec is one simulated GPU node: a Node object and the driver process serving a fake
// machine for it.
type NodeSpec struct {
	// Name is the node name (at most 20 characters: socket paths are built from it).
	Name             string
	Machine          string
	MIGConfig        string
	DynamicMIG       bool
	ConsumableMemory bool
	// ServiceAccount overrides the chart's ServiceAccount (namespace releaseNamespace).
	ServiceAccount string
	// ExtraArgs are further driver flags.
	ExtraArgs []string
	// Env is added to the driver's environment ("NAME=value").
	Env []string
	// StopMayFail: the driver may exit with an error on SIGTERM (it never finished starting),
	// and it may fail to start at all: StartNode then records why in TestNode.StartErr.
	StopMayFail bool
	// NoWaitForSlices returns before the pool is published (for tests that expect it not
	// to be).
	NoWaitForSlices bool
	// DaemonSet overrides the chart's DaemonSet the driver's command line comes from.
	DaemonSet *appsv1.DaemonSet
}

// TestNode is a running simulated GPU node.
type TestNode struct {
	Spec   NodeSpec
	Node   *corev1.Node
	Driver *framework.Driver
	// Kubelet is the plugin as registered by the fake kubelet (the newest registration).
	Kubelet *fakekubelet.Plugin
	// Baseline is the fake machine and host state right after the driver started.
	Baseline FakeState
	// StartErr is why the driver never registered (only with NodeSpec.StopMayFail).
	StartErr error
}

// FakeState mirrors the driver's GET /state answer (examples/gpu-dra-driver fakecontrol.go).
type FakeState struct {
	GPUs []struct {
		Index      int                        `json:"index"`
		UUID       string                     `json:"uuid"`
		MIGEnabled bool                       `json:"migEnabled"`
		Instances  []gputest.GPUInstanceState `json:"instances,omitempty"`
	} `json:"gpus"`
	Host sharingtest.HostState `json:"host"`
}

// args are the driver flags of the spec, after the chart's.
func (spec NodeSpec) args(ctrl, metrics, kubeconfig string) []string {
	a := []string{"--kubeconfig=" + kubeconfig, "--machine=" + spec.Machine, "--fake-control=" + ctrl, "--metrics-addr=" + metrics}
	if spec.MIGConfig != "" {
		a = append(a, "--mig-config="+spec.MIGConfig)
	}
	if spec.DynamicMIG {
		a = append(a, "--dynamic-mig")
	}
	if spec.ConsumableMemory {
		a = append(a, "--consumable-memory")
	}
	return append(a, spec.ExtraArgs...)
}

// StartNode creates a Ready Node, starts its driver authenticated as the chart's
// ServiceAccount, registers it with the fake kubelet and waits for its pool to be published.
// Everything is stopped when t ends.
func (s *Suite) StartNode(t testing.TB, spec NodeSpec) *TestNode {
	t.Helper()
	ctx := context.Background()
	node, err := framework.CreateReadyNode(ctx, s.Client, spec.Name, gpuNodeLabels(spec.Machine))
	if err != nil {
		t.Fatal(err)
	}
	n := &TestNode{Spec: spec, Node: node}
	d, err := s.startDriver(ctx, spec, "")
	if err != nil {
		if spec.StopMayFail {
			n.StartErr = err
			return n
		}
		t.Fatal(err)
	}
	n.Driver = d
	t.Cleanup(func() { n.stop(t) })
	if err := n.register(ctx); err != nil {
		if spec.StopMayFail {
			n.StartErr = err
			return n
		}
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return d.FakeControl(ctx, "GET", "/state", nil, &n.Baseline) == nil, nil
	}); err != nil {
		t.Fatalf("the driver's fake control never answered: %v", err)
	}
	if !spec.NoWaitForSlices {
		if _, err := s.WaitForPool(ctx, spec.Name); err != nil {
			t.Fatalf("%v\ndriver log:\n%s", err, d.Proc.Tail(3000))
		}
		// The pool is visible before the driver has finished starting (the kubelet-plugin
		// helper's slice controller takes about a second more): wait until it serves.
		if err := waitLogged(n, `"Serving"`); err != nil {
			t.Fatalf("driver of %s never logged that it serves: %v\ndriver log:\n%s", spec.Name, err, d.Proc.Tail(3000))
		}
	}
	return n
}

// startDriver runs one driver process for spec, in the node's directory (shared by every
// process of the node, as hostPath volumes are). As the chart's ServiceAccount it stands in for
// the DaemonSet's pod on the node: its token is bound to that pod and, unless podUID is given
// (a second process, as in a rolling update), it has the pod's UID.
func (s *Suite) startDriver(ctx context.Context, spec NodeSpec, podUID string) (*framework.Driver, error) {
	dir := filepath.Join(s.Dir, "n", spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	sa, pod := spec.ServiceAccount, (*corev1.Pod)(nil)
	var err error
	if sa == "" {
		sa = s.ServiceAccount
		pod, err = s.daemonSetPod(ctx, spec.Name)
	} else {
		pod, err = s.standInPod(ctx, sa, spec.Name)
	}
	if err != nil {
		return nil, err
	}
	if podUID == "" && pod != nil {
		podUID = string(pod.UID)
	}
	if podUID == "" {
		podUID = uuid.NewString()
	}
	token, err := framework.ServiceAccountToken(ctx, s.Client, releaseNamespace, sa, pod)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig-"+podUID[:8])
	if err := framework.WriteKubeconfig(kubeconfig, s.CP.URL, s.CP.CAFile, framework.Credentials{Token: token}); err != nil {
		return nil, err
	}
	ctrl, err := framework.LoopbackAddr()
	if err != nil {
		return nil, err
	}
	metrics, err := framework.LoopbackAddr()
	if err != nil {
		return nil, err
	}
	d, err := framework.StartDriver(ctx, framework.DriverSpec{
		Binary: s.DriverBinary, DaemonSet: cmp.Or(spec.DaemonSet, s.DaemonSet), Node: spec.Name, PodUID: podUID, Dir: dir,
		ExtraArgs: spec.args(ctrl, metrics, kubeconfig), ExtraEnv: spec.Env,
		LogFile: filepath.Join(s.Dir, "logs", spec.Name+".log"),
	})
	if err != nil {
		return nil, err
	}
	s.track(d)
	return d, nil
}

// standInPod creates (once) a pod of ServiceAccount sa bound to node, so that the driver's
// token for sa names the node as a plugin pod's token does (Kubernetes 1.37 authorizes writes to
// a claim's status.devices by that node). No kubelet runs it.
func (s *Suite) standInPod(ctx context.Context, sa, node string) (*corev1.Pod, error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sa + "-plugin", Namespace: releaseNamespace},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node, Containers: []corev1.Container{{Name: "plugin", Image: "gpu-dra-driver"}}}}
	created, err := s.Client.CoreV1().Pods(releaseNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return s.Client.CoreV1().Pods(releaseNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("stand-in pod of ServiceAccount %s on node %s: %w", sa, node, err)
	}
	return created, nil
}

// daemonSetPod waits for the chart DaemonSet's pod bound to node (the DaemonSet controller
// creates it, the scheduler binds it; no kubelet runs it).
func (s *Suite) daemonSetPod(ctx context.Context, node string) (*corev1.Pod, error) {
	sel := metav1.FormatLabelSelector(s.DaemonSet.Spec.Selector)
	var out *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel, FieldSelector: "spec.nodeName=" + node})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		out = &pods.Items[0]
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the chart's DaemonSet pod for node %s: %w", node, err)
	}
	return out, nil
}

// register registers the node's current driver with the fake kubelet.
func (n *TestNode) register(ctx context.Context) error {
	p, err := fakekubelet.Register(ctx, n.Driver.RegistrationSocket)
	if err != nil {
		return err
	}
	if n.Kubelet != nil {
		_ = n.Kubelet.Close()
	}
	n.Kubelet = p
	return nil
}

func (n *TestNode) stop(t testing.TB) {
	if n.Kubelet != nil {
		_ = n.Kubelet.Close()
	}
	if err := n.Driver.Proc.Stop(10 * time.Second); err != nil && !n.Spec.StopMayFail {
		t.Errorf("driver of %s did not stop cleanly on SIGTERM: %v", n.Spec.Name, err)
	}
	if t.Failed() {
		t.Logf("driver log of %s: %s", n.Spec.Name, n.Driver.Proc.LogFile)
	}
}

// State is the fake machine and host state now.
func (n *TestNode) State(ctx context.Context) (FakeState, error) {
	var st FakeState
	err := n.Driver.FakeControl(ctx, "GET", "/state", nil, &st)
	return st, err
}

// InjectXID makes the fake machine report XID xid on GPU index gpu.
func (n *TestNode) InjectXID(ctx context.Context, gpu int, xid uint64) error {
	return n.Driver.FakeControl(ctx, "POST", "/xid", url.Values{"gpu": {strconv.Itoa(gpu)}, "xid": {strconv.FormatUint(xid, 10)}}, nil)
}

// MarkHealthy declares GPU index gpu healthy again.
func (n *TestNode) MarkHealthy(ctx context.Context, gpu int) error {
	return n.Driver.FakeControl(ctx, "POST", "/healthy", url.Values{"gpu": {strconv.Itoa(gpu)}}, nil)
}

// CDISpecs lists the spec files in the node's CDI directory.
func (n *TestNode) CDISpecs() ([]string, error) {
	dir := n.Driver.ArgValue("--cdi-root")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out, nil
}

// Slices returns the driver's ResourceSlices of a node in the shared cluster.
func Slices(ctx context.Context, node string) ([]resourceapi.ResourceSlice, error) {
	return suite.Slices(ctx, node)
}

// Slices returns the driver's ResourceSlices of a node.
func (s *Suite) Slices(ctx context.Context, node string) ([]resourceapi.ResourceSlice, error) {
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: node, resourceapi.ResourceSliceSelectorDriver: driverName}.AsSelector().String()
	list, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// WaitForPool waits until node's pool in the shared cluster is complete (Suite.WaitForPool).
func WaitForPool(ctx context.Context, node string) ([]resourceapi.ResourceSlice, error) {
	return suite.WaitForPool(ctx, node)
}

// WaitForPool waits until node's pool is complete: every slice of its newest generation is
// there, and returns them.
func (s *Suite) WaitForPool(ctx context.Context, node string) ([]resourceapi.ResourceSlice, error) {
	var out []resourceapi.ResourceSlice
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := s.Slices(ctx, node)
		if err != nil {
			return false, err
		}
		out, last = completePool(slices)
		return out != nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pool of node %s never complete (%s): %w", node, last, err)
	}
	return out, nil
}

// completePool returns the slices of the newest generation when all of them exist.
func completePool(slices []resourceapi.ResourceSlice) ([]resourceapi.ResourceSlice, string) {
	var gen int64
	for _, s := range slices {
		gen = max(gen, s.Spec.Pool.Generation)
	}
	var cur []resourceapi.ResourceSlice
	for _, s := range slices {
		if s.Spec.Pool.Generation == gen {
			cur = append(cur, s)
		}
	}
	if len(cur) == 0 || int64(len(cur)) != cur[0].Spec.Pool.ResourceSliceCount {
		return nil, fmt.Sprintf("%d slices of generation %d", len(cur), gen)
	}
	return cur, ""
}

// Devices indexes the devices of a pool by name.
func Devices(slices []resourceapi.ResourceSlice) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}
