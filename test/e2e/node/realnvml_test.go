package node

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/test/e2e/cmd/nvml-standin/standin"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/kubenode"
)

// TestNodeRealNVML (issue 27): the production image, as the chart runs it on a node with a real
// driver (fakeMachine.name "", nvidiaDriverRoot set), loads NVML from the driver root with
// --nvml=real: here the stand-in libnvidia-ml (test/e2e/cmd/nvml-standin) serving a DGX A100 in
// mig-parted's all-balanced layout, installed as a Debian driver installs it (a versioned file
// and the libnvidia-ml.so.1 link, an absolute target resolved inside the root). Containers made
// from the chart's real-GPU DaemonSet (image, command's binary, environment, mounts) run the
// driver's `version` and `inventory --nvml=real`: both must find NVML in the driver root, and
// the inventory must be the gputest machine's own, GPU and MIG device UUIDs included.
//
// The DaemonSet's `serve` itself cannot run in real mode on this node: it reads the kernel
// module's version from /proc/driver/nvidia/version of its own container (cdi.Discover with the
// proc root "/"), which no NVIDIA kernel module provides here and runc does not let a pod mount
// over. Claims are therefore not prepared through real NVML in this tier (see docs/install.md).
func TestNodeRealNVML(t *testing.T) {
	ctx := context.Background()
	s := suite
	m, err := gputest.New(machine, gputest.WithMIGConfig("all-balanced"), gputest.WithDriverVersion(cditest.DefaultVersion))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(s.Node.Dir, "standin-root")
	stateDir := filepath.Join(s.Node.Dir, "standin-state")
	t.Cleanup(func() { _ = os.RemoveAll(root); _ = os.RemoveAll(stateDir) })
	if err := kubenode.FakeDriverRoot(root, gpus, kubenode.WithNVMLStandIn(m, stateDir)); err != nil {
		t.Fatal(err)
	}
	pod := s.realModePod(t, root, stateDir)
	if _, err := s.Client.CoreV1().Pods(releaseNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Client.CoreV1().Pods(releaseNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	done := s.waitFinished(ctx, t, pod.Name)
	logs := map[string]string{}
	for _, c := range pod.Spec.Containers {
		if logs[c.Name], err = s.Node.Kubelet.ContainerLog(done, c.Name); err != nil {
			t.Fatalf("log of %s/%s: %v", pod.Name, c.Name, err)
		}
	}
	if done.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("the driver's commands failed with real NVML from the driver root: %s\nversion:\n%s\ninventory:\n%s", containerStates(done), logs["version"], logs["inventory"])
	}
	if want := "nvml:    13." + cditest.DefaultVersion; !strings.Contains(logs["version"], want) {
		t.Errorf("`version` does not report the stand-in NVML (%q):\n%s", want, logs["version"])
	}
	checkInventory(t, m, logs["inventory"])
}

// realModePod is a pod made from the chart's DaemonSet rendered for a node with a real driver at
// root, adapted to this node as the suite's plugin is, with the stand-in's state directory
// mounted at its own path (the chart mounts the driver root read-only; the library follows the
// link beside it there). Its containers run `version` and `inventory --nvml=real -o json`.
func (s *Suite) realModePod(t *testing.T, root, stateDir string) *corev1.Pod {
	t.Helper()
	spec := s.realModePodSpec(t, root)
	dirType := corev1.HostPathDirectory
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "standin-state",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: stateDir, Type: &dirType}}})
	base := spec.Containers[0]
	base.VolumeMounts = append(base.VolumeMounts, corev1.VolumeMount{Name: "standin-state", MountPath: stateDir})
	version, inventory := base, *base.DeepCopy()
	version.Name, version.Command, version.Args = "version", []string{"gpu-dra-driver", "version"}, []string{"--driver-root=/driver-root"}
	inventory.Name, inventory.Command = "inventory", []string{"gpu-dra-driver", "inventory"}
	inventory.Args = []string{"--nvml=real", "--driver-root=/driver-root", "-o", "json"}
	spec.Containers = []corev1.Container{version, inventory}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "real-nvml", Namespace: releaseNamespace}, Spec: spec}
}

// realModePodSpec is the pod spec of the chart's DaemonSet rendered for a node with a real
// driver at root, adapted to this node as the suite's plugin is, for a pod that runs once on the
// node: no probes, restartPolicy Never. Tests replace its container's command.
func (s *Suite) realModePodSpec(t *testing.T, root string) corev1.PodSpec {
	t.Helper()
	values := s.chartValues(map[string]any{"nvidiaDriverRoot": root, "fakeMachine": map[string]any{"name": ""}})
	objs, err := framework.RenderChart(filepath.Join(s.Repo, chartPath), s.Bins.KubernetesVersion,
		framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: values})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := framework.DaemonSetFrom(objs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.adaptToNode(&ds.Spec.Template.Spec); err != nil {
		t.Fatal(err)
	}
	spec := *ds.Spec.Template.Spec.DeepCopy()
	spec.NodeName = nodeName
	spec.RestartPolicy = corev1.RestartPolicyNever
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = nil, nil, nil
	}
	return spec
}

// waitFinished waits for the pod to succeed or fail.
func (s *Suite) waitFinished(ctx context.Context, t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = s.Client.CoreV1().Pods(releaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("pod %s did not finish: %v (%s)\nevents:\n%s", name, err, containerStates(p), s.events(ctx, releaseNamespace))
	}
	return p
}

// checkInventory compares the inventory the container printed with the gputest machine's own
// enumeration: the same GPUs (UUIDs, bus IDs, memory, ...) and MIG devices.
func checkInventory(t *testing.T, m *gputest.Machine, log string) {
	t.Helper()
	start := strings.Index(log, "{")
	if start < 0 {
		t.Fatalf("`inventory -o json` printed no JSON:\n%s", log)
	}
	var got gpu.Inventory
	if err := json.NewDecoder(strings.NewReader(log[start:])).Decode(&got); err != nil {
		t.Fatalf("`inventory -o json`: %v\n%s", err, log)
	}
	want, err := nvmlgpu.Enumerate(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.GPUs) != gpus || countMIG(want) == 0 {
		t.Fatalf("the gputest machine has %d GPUs and %d MIG devices; want %d GPUs in MIG mode", len(want.GPUs), countMIG(want), gpus)
	}
	opts := cmp.Options{cmpopts.EquateEmpty(), cmpopts.IgnoreFields(gpu.GPU{}, "MIGGeometry")}
	if diff := cmp.Diff(want, &got, opts); diff != "" {
		t.Errorf("inventory through real NVML from the driver root differs from the gputest machine's (-gputest +container):\n%s", diff)
	}
}

func countMIG(inv *gpu.Inventory) int {
	n := 0
	for _, g := range inv.GPUs {
		n += len(g.MIGDevices)
	}
	return n
}

// TestNodeRealNVMLServe (issue 27): the chart's DaemonSet in real mode (fakeMachine.name "",
// nvidiaDriverRoot a fake driver root whose libnvidia-ml is the stand-in serving an
// unpartitioned DGX A100, dynamicMIG on) runs `serve --nvml=real` and serves the node. The only
// changes to the chart's pod beside the suite's (adaptToNode) are realServeAdapt's: the kernel's
// /proc files and the device nodes are read from the fake driver root, and the stand-in's state
// directory is mounted. The plugin becomes Ready, publishes exactly the gputest machine's GPUs
// (UUIDs and driver version, which the suite's fake machine reports differently), prepares an
// exclusive GPU whose device node the container gets, and creates a MIG instance in the
// stand-in's state for a MIG claim; unprepare removes the CDI specs, the checkpoint entries and
// the instance.
func TestNodeRealNVMLServe(t *testing.T) {
	ctx := context.Background()
	s := suite
	m, err := gputest.New(machine, gputest.WithDriverVersion(cditest.DefaultVersion))
	if err != nil {
		t.Fatal(err)
	}
	// The chart's driver-root volume propagates mounts from the host: on the node's shared mount.
	root := filepath.Join(s.Node.Dir, "standin-serve-root")
	stateDir := filepath.Join(s.Node.Dir, "standin-serve-state")
	t.Cleanup(func() { _ = os.RemoveAll(root); _ = os.RemoveAll(stateDir) })
	if err := kubenode.FakeDriverRoot(root, gpus, kubenode.WithNVMLStandIn(m, stateDir)); err != nil {
		t.Fatal(err)
	}
	s.reinstallAdapted(ctx, t, map[string]any{"nvidiaDriverRoot": root, "fakeMachine": map[string]any{"name": ""}, "dynamicMIG": true},
		realServeAdapt(stateDir))
	s.checkRealPlugin(ctx, t)
	s.checkRealSlices(ctx, t, m)

	t.Run("exclusive GPU", func(t *testing.T) {
		ns := s.namespace(ctx, t)
		s.claimTemplate(ctx, t, ns, "one-gpu", "gpu.nvidia.com", 1)
		pod := s.runPod(ctx, t, workloadPod(ns, "exclusive", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}, "main"))
		claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
		s.checkGPUNodes(ctx, t, pod, devs, "main")
		if !s.checkpointNames(t, string(claim.UID)) || len(s.cdiSpecsOf(t, string(claim.UID))) == 0 {
			t.Errorf("prepared claim %s: CDI specs %v, in the checkpoint: %v; want both", claim.UID, s.cdiSpecsOf(t, string(claim.UID)), s.checkpointNames(t, string(claim.UID)))
		}
		s.deletePod(ctx, t, pod)
		s.waitUnprepared(ctx, t, string(claim.UID))
	})

	t.Run("dynamic MIG", func(t *testing.T) {
		if n := standinInstances(t, stateDir); len(n) != 0 {
			t.Fatalf("MIG instances in the stand-in before the pod: %v, want none", n)
		}
		ns := s.namespace(ctx, t)
		s.migClaimTemplate(ctx, t, ns, "mig", "1g.5gb")
		pod := s.runPod(ctx, t, workloadPod(ns, "mig", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("mig")}, "main"))
		claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
		dev := s.device(ctx, t, devs[0])
		// The stand-in's root is laid out as the suite's (same GPUs, same mig-minors file).
		s.checkMIGNodes(t, dev, s.report(ctx, t, pod, "main").Devices)
		parent := int(intAttr(dev, "parentIndex"))
		if n := standinInstances(t, stateDir); len(n) != 1 || n[parent] != [2]int{1, 1} {
			t.Errorf("stand-in MIG instances (GPU index: [GPU instances, compute instances]) while the pod runs: %v, want one of each on GPU %d", n, parent)
		}
		s.deletePod(ctx, t, pod)
		s.waitUnprepared(ctx, t, string(claim.UID))
		if n := standinInstances(t, stateDir); len(n) != 0 {
			t.Errorf("stand-in MIG instances after unprepare: %v, want none", n)
		}
	})
}

// realServeAdapt is what the node tier changes in the chart's real-mode plugin pod (documented
// in docs/install.md's node-tier table): --proc-root=/driver-root/proc, because the fake driver root
// carries the kernel files this node's /proc lacks; --dev-root= (empty, last wins over the
// chart's "/"), so that device nodes are read from the driver root and the CDI specs name their
// host paths below nvidiaDriverRoot, as with the fake machine's driver root; and the stand-in's
// state directory mounted at its own path, writable (the stand-in writes MIG changes there).
func realServeAdapt(stateDir string) func(*corev1.PodSpec) {
	return func(spec *corev1.PodSpec) {
		dirType := corev1.HostPathDirectory
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "standin-state",
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: stateDir, Type: &dirType}}})
		c := &spec.Containers[0]
		c.Args = append(c.Args, "--proc-root=/driver-root/proc", "--dev-root=")
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "standin-state", MountPath: stateDir})
	}
}

// checkRealPlugin checks that the plugin pod serving the node runs the chart's real mode with
// realServeAdapt's arguments, and has not restarted.
func (s *Suite) checkRealPlugin(ctx context.Context, t *testing.T) {
	t.Helper()
	pod, err := s.servingPluginPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	args := pod.Spec.Containers[0].Args
	if slices.Contains(args, "--nvml=fake") || !slices.Contains(args, "--proc-root=/driver-root/proc") {
		t.Fatalf("plugin pod %s runs %v, want the chart's real mode with --proc-root=/driver-root/proc", pod.Name, args)
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.RestartCount != 0 {
			t.Errorf("plugin pod %s: container %s restarted %d times", pod.Name, c.Name, c.RestartCount)
		}
	}
}

// publishedGPU is what the node's ResourceSlices say of a device with a UUID.
type publishedGPU struct {
	UUID, DriverVersion string
}

// checkRealSlices compares the devices with a UUID that the node's ResourceSlices publish with
// the gputest machine's own enumeration: the same UUIDs, with the stand-in's driver version.
func (s *Suite) checkRealSlices(ctx context.Context, t *testing.T, m *gputest.Machine) {
	t.Helper()
	want, err := nvmlgpu.Enumerate(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var wantGPUs []publishedGPU
	for _, g := range want.GPUs {
		wantGPUs = append(wantGPUs, publishedGPU{UUID: g.UUID, DriverVersion: want.DriverVersion})
	}
	sl, err := s.nodeSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []publishedGPU
	for _, x := range sl {
		for _, d := range x.Spec.Devices {
			if uuid := strAttr(d, "uuid"); uuid != "" {
				v := d.Attributes[resourceapi.QualifiedName(driverName+"/driverVersion")]
				if v.VersionValue == nil {
					v = d.Attributes["driverVersion"]
				}
				got = append(got, publishedGPU{UUID: uuid, DriverVersion: ptr.Deref(v.VersionValue, "")})
			}
		}
	}
	byUUID := cmpopts.SortSlices(func(a, b publishedGPU) bool { return a.UUID < b.UUID })
	if diff := cmp.Diff(wantGPUs, got, byUUID); diff != "" {
		t.Errorf("devices with a UUID in node %s's ResourceSlices differ from the gputest machine's GPUs (-gputest +published):\n%s", nodeName, diff)
	}
}

// standinInstances reads the stand-in's state: for each GPU index with MIG instances, its
// number of GPU instances and of compute instances.
func standinInstances(t *testing.T, stateDir string) map[int][2]int {
	t.Helper()
	st, err := standin.ReadState(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	n := map[int][2]int{}
	for i, g := range st.GPUs {
		if len(g.GPUInstances)+len(g.ComputeInstances) > 0 {
			n[i] = [2]int{len(g.GPUInstances), len(g.ComputeInstances)}
		}
	}
	return n
}
