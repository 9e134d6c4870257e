package node

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
	"github.com/gpudra/gpudra/test/e2e/framework/kubenode"
)

// The chart's release on the node, and what the suite runs.
const (
	releaseName      = "gpu-dra-driver"
	releaseNamespace = "gpu-dra-driver"
	chartPath        = "deployments/helm/gpu-dra-driver"
	driverName       = "gpu.nvidia.com"
	nodeName         = "gn-1"
	// machine is the fake machine the chart's plugin serves (8 × A100-SXM4-40GB).
	machine = "dgx-a100-40gb"
	gpus    = 8
	// imageTag is the driver image's tag: the chart's repository, this tag.
	imageTag      = "node-e2e"
	workloadImage = "gpudra.test/gpu-workload:node-e2e"
)

var suite *Suite

// Suite is the control plane, the node and the chart installed on it, shared by every test.
type Suite struct {
	// Dir holds everything the run writes (short: sockets live below it).
	Dir        string
	Repo       string
	Bins       *binaries.Set
	NodeBins   *binaries.Node
	CP         *framework.ControlPlane
	Client     kubernetes.Interface
	Applier    *framework.Applier
	Node       *kubenode.Node
	DriverRoot string
	// Values are the chart values the suite installs with.
	Values map[string]any
	// Network is the node's pod network; APIServer forwards from it to the API server.
	Network   *kubenode.PodNetwork
	APIServer *kubenode.Forwarder
	// peerInstalled: installPeer installed dra-example-driver's plugin.
	peerInstalled bool
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(framework.Main(m, "node tier (control plane, node and chart)", func(ctx context.Context) (string, func(bool), error) {
		s, err := newSuite(ctx)
		if s == nil {
			return "", nil, err
		}
		suite = s
		return s.Dir, s.teardown, err
	}))
}

func newSuite(ctx context.Context) (*Suite, error) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		return nil, err
	}
	s := &Suite{Repo: repo}
	if s.Bins, err = binaries.Resolve(ctx); err != nil {
		return nil, err
	}
	if err := s.Bins.Build(ctx, os.Stdout, false); err != nil {
		return nil, err
	}
	if s.NodeBins, err = s.Bins.BuildNode(ctx, os.Stdout, false); err != nil {
		return nil, err
	}
	if err := binaries.EnsureHostTools(ctx, os.Stdout); err != nil {
		return nil, err
	}
	if s.Dir, err = shortDir(); err != nil {
		return nil, err
	}
	archive, err := s.buildImages(ctx)
	if err != nil {
		return s, err
	}
	s.Network = kubenode.NewPodNetwork(filepath.Join(s.Dir, "n"))
	s.CP, err = framework.StartControlPlane(ctx, s.Bins, filepath.Join(s.Dir, "cp"),
		framework.WithAllControllers(), framework.WithServingIPs(s.Network.Gateway))
	if err != nil {
		return s, err
	}
	if s.Client, err = kubernetes.NewForConfig(s.CP.Admin); err != nil {
		return s, err
	}
	if s.Applier, err = framework.NewApplier(s.CP.Admin); err != nil {
		return s, err
	}
	s.Node, err = kubenode.Start(ctx, s.CP, s.NodeBins, kubenode.Config{
		Name: nodeName, Dir: filepath.Join(s.Dir, "n"), Images: archive,
		Labels:  map[string]string{"nvidia.com/gpu.present": "true"},
		Network: s.Network,
	})
	if err != nil {
		return s, err
	}
	host, port, err := hostPort(s.CP.URL)
	if err != nil {
		return s, err
	}
	if s.APIServer, err = kubenode.Forward(s.Network.Gateway, net.JoinHostPort(host, port)); err != nil {
		return s, err
	}
	fmt.Printf("node: %s Ready\n", nodeName)
	// On the node's shared mount: the chart mounts the driver root with HostToContainer. The
	// fake nvidia-imex is for TestNodeComputeDomain's IMEX daemons.
	s.DriverRoot = filepath.Join(s.Node.Dir, "driver-root")
	if err := kubenode.FakeDriverRoot(s.DriverRoot, gpus, kubenode.WithFakeIMEX()); err != nil {
		return s, err
	}
	return s, s.installChart(ctx, nil)
}

// shortDir creates /tmp/gn<6 hex digits>: a fixed length, so that the sockets below it (the
// kubelet-plugin helper's rolling-update registration socket of compute-domain.nvidia.com is
// the longest, 93 bytes below the suite's directory: n/r/plugins_registry/<driver>-<pod
// UID>-reg.sock) stay within the 107 bytes of a unix socket path on every run.
func shortDir() (string, error) {
	for range 100 {
		dir := fmt.Sprintf("/tmp/gn%06x", rand.IntN(1<<24))
		if err := os.Mkdir(dir, 0o755); err == nil {
			return dir, nil
		} else if !os.IsExist(err) {
			return "", err
		}
	}
	return "", fmt.Errorf("no free directory name /tmp/gn<hex>")
}

// buildImages builds the drivers as `make build` and `make build-cd` do, the pause and workload programs
// statically, and writes the three images into one archive for containerd.
func (s *Suite) buildImages(ctx context.Context) (string, error) {
	start := time.Now()
	driver := filepath.Join(s.Dir, "gpu-dra-driver")
	if out, err := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", s.Repo, "build", "BIN="+driver).CombinedOutput(); err != nil {
		return "", fmt.Errorf("make build: %w\n%s", err, out)
	}
	cdDriver := filepath.Join(s.Dir, "compute-domain-driver")
	if out, err := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", s.Repo, "build-cd", "CD_BIN="+cdDriver).CombinedOutput(); err != nil {
		return "", fmt.Errorf("make build-cd: %w\n%s", err, out)
	}
	progs := map[string]string{}
	for _, p := range []string{"node-pause", "gpu-workload"} {
		bin := filepath.Join(s.Dir, p)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/"+p)
		cmd.Dir = filepath.Join(s.Repo, "test", "e2e")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build ./cmd/%s: %w\n%s", p, err, out)
		}
		progs[p] = bin
	}
	driverImage, err := kubenode.DriverImage("ghcr.io/gpudra/gpu-dra-driver:"+imageTag, driver, cdDriver)
	if err != nil {
		return "", err
	}
	archive := filepath.Join(s.Dir, "images.tar")
	err = kubenode.WriteArchive(archive,
		kubenode.StaticImage(kubenode.SandboxImage, progs["node-pause"]),
		kubenode.StaticImage(workloadImage, progs["gpu-workload"]),
		driverImage)
	if err != nil {
		return "", err
	}
	fmt.Printf("node: driver, pause and workload images built in %s\n", time.Since(start).Round(100*time.Millisecond))
	return archive, nil
}

// chartValues are the values a platform team would set for this node: its kubelet directory,
// containerd's CDI directory, the image, and (tests only) the fake machine with its fake
// driver installation. extra overrides them.
func (s *Suite) chartValues(extra map[string]any) map[string]any {
	v := map[string]any{
		"kubeletDir": s.Node.Kubelet.RootDir,
		"cdiRoot":    s.Node.CDIDir,
		"image":      map[string]any{"tag": imageTag},
		"fakeMachine": map[string]any{
			"name":       machine,
			"driverRoot": s.DriverRoot,
			// MPS shm tmpfs mounted for real, privileged with Bidirectional propagation as
			// in the real-GPU mode: TestNodeMPS checks that containers get the daemon's tmpfs.
			"mountTmpfs": true,
		},
		"logVerbosity": 4,
	}
	for k, x := range extra {
		v[k] = x
	}
	return v
}

// installChart renders the chart as `helm upgrade --install` would with chartValues(extra),
// adapts the DaemonSet to this node's network (see adaptToNode) and applies it.
func (s *Suite) installChart(ctx context.Context, extra map[string]any) error {
	return s.installChartAdapted(ctx, extra, nil)
}

// installChartAdapted is installChart with a test's own change to the DaemonSet's pod spec
// (adapt, when not nil), made after adaptToNode's.
func (s *Suite) installChartAdapted(ctx context.Context, extra map[string]any, adapt func(*corev1.PodSpec)) error {
	s.Values = s.chartValues(extra)
	objs, err := framework.RenderChart(filepath.Join(s.Repo, chartPath), s.Bins.KubernetesVersion,
		framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: s.Values})
	if err != nil {
		return err
	}
	if err := framework.CreateNamespace(ctx, s.Client, releaseNamespace, nil); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			objs[i], err = s.adaptDaemonSet(o, adapt)
		case "Deployment":
			objs[i], err = s.adaptDeployment(o)
		}
		if err != nil {
			return err
		}
	}
	if err := s.Applier.Apply(ctx, releaseNamespace, objs...); err != nil {
		return err
	}
	return s.waitPluginReady(ctx)
}

// adaptToNode makes the chart's pods run on a node without kube-proxy: they reach the API
// server through the forwarder on the pod network's gateway instead of the kubernetes
// Service. With a fake machine the GPU plugin also serves the fake machine's test controls on a
// unix socket in the plugin directory, named after the pod (two plugin pods run side by side
// during a rolling update); the ComputeDomain plugin (compute-domain-driver) has none. Nothing
// else of the chart's pods changes.
func (s *Suite) adaptToNode(spec *corev1.PodSpec) error {
	host, port, err := net.SplitHostPort(s.APIServer.Addr)
	if err != nil {
		return err
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.Env = append(c.Env,
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
		if slices.Contains(c.Args, "--nvml=fake") && !slices.Contains(c.Command, cdCommand) {
			c.Args = append(c.Args, "--fake-control=unix:"+s.fakeControlSocket("$(POD_UID)"))
		}
	}
	return nil
}

// fakeControlSocket is the test controls' socket of the plugin pod with UID uid.
func (s *Suite) fakeControlSocket(uid string) string {
	return filepath.Join(s.Node.Kubelet.RootDir, "plugins", driverName, "fc-"+uid+".sock")
}

// adaptDeployment applies adaptToNode to a rendered Deployment (the ComputeDomain controller).
func (s *Suite) adaptDeployment(o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
		return nil, err
	}
	if err := s.adaptToNode(&d.Spec.Template.Spec); err != nil {
		return nil, err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: u}, nil
}

// adaptDaemonSet applies adaptToNode, then adapt (when not nil), to a rendered DaemonSet; its
// update strategy stays the chart's (a surge update: the new plugin pod starts beside the old one).
func (s *Suite) adaptDaemonSet(o *unstructured.Unstructured, adapt func(*corev1.PodSpec)) (*unstructured.Unstructured, error) {
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
		return nil, err
	}
	if err := s.adaptToNode(&ds.Spec.Template.Spec); err != nil {
		return nil, err
	}
	if adapt != nil {
		adapt(&ds.Spec.Template.Spec)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ds)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: u}, nil
}

// teardown stops the node and the control plane; keep leaves the logs in Dir.
func (s *Suite) teardown(keep bool) {
	if s.APIServer != nil {
		_ = s.APIServer.Close()
	}
	if s.Node != nil {
		s.Node.Stop()
	}
	if s.CP != nil {
		s.CP.Stop()
	}
	if s.Dir == "" {
		return
	}
	if keep {
		_ = os.RemoveAll(filepath.Join(s.Dir, "cp", "etcd"))
		_ = os.RemoveAll(filepath.Join(s.Dir, "n", "containerd", "root"))
		fmt.Printf("node: logs kept in %s (control plane: cp/logs; kubelet: n/kubelet/kubelet.log; containerd: n/containerd/containerd.log; pods: n/kubelet/pod-logs)\n", s.Dir)
		return
	}
	_ = os.RemoveAll(s.Dir)
}

// pluginPods returns the chart's plugin pods on the node.
func (s *Suite) pluginPods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := s.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=kubelet-plugin", FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// servingPluginPod returns the newest plugin pod on the node that is ready and not being
// deleted: the one kubelet sends new calls to.
func (s *Suite) servingPluginPod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := s.pluginPods(ctx)
	if err != nil {
		return nil, err
	}
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || !podReady(p) {
			continue
		}
		if best == nil || best.CreationTimestamp.Before(&p.CreationTimestamp) {
			best = p
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no ready plugin pod on node %s", nodeName)
	}
	return best, nil
}
