package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// The example driver's names: its default driver name for the gpu profile, a DeviceClass for
// it (its chart ships one like it) and the ServiceAccount it runs as here.
const (
	exampleDriverName = "gpu.example.com"
	exampleNamespace  = "dra-example"
	exampleSA         = "dra-example-driver"
	// exampleDevices is how many fake GPUs each example-driver node publishes: enough for a
	// burst of distinct exclusive claims.
	exampleDevices = burstSize
	// burstMemory is each claim's share of a GPU in serve's burst (consumable memory).
	burstMemory = "2Gi"
)

// benchEnv is what BenchmarkPrepareLatency measures: serve's claims by kind, serve's
// consumable-memory node for bursts, and the example driver at serve's QPS and at its own
// default (nil without -bench.example-driver).
type benchEnv struct {
	ours       map[string]claimTarget
	oursBurst  *target
	ex, exSlow *target
}

// bursty are the targets with enough claims for a burst, serve's first.
func (e *benchEnv) bursty() []*target {
	out := []*target{e.oursBurst}
	for _, t := range []*target{e.ex, e.exSlow} {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

func newBenchEnv(ctx context.Context, b *testing.B) *benchEnv {
	env := &benchEnv{ours: map[string]claimTarget{}}
	oursDriver := oursName + " (" + equalQPS + ")"
	for _, n := range []struct {
		spec   NodeSpec
		claims []*resourceapi.ResourceClaim
	}{
		{NodeSpec{Name: "bench-excl", Machine: "dgx-a100-40gb"}, []*resourceapi.ResourceClaim{
			claimSpec("excl", "gpu.nvidia.com", "", nil),
			claimSpec("ts", "gpu.nvidia.com", "", timeSlicingLong),
			claimSpec("mps", "gpu.nvidia.com", "", mpsConfig)}},
		{NodeSpec{Name: "bench-static", Machine: "dgx-a100-40gb", MIGConfig: "all-balanced"}, []*resourceapi.ResourceClaim{
			claimSpec("static", "mig.nvidia.com", `device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`, nil)}},
		{NodeSpec{Name: "bench-dyn", Machine: "dgx-a100-40gb", DynamicMIG: true}, []*resourceapi.ResourceClaim{
			claimSpec("dynamic", "mig.nvidia.com", `device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`, nil)}},
	} {
		node := suite.StartNode(b, n.spec)
		t := &target{bench: "gpudra", driver: oursDriver, plugin: node.Kubelet, proc: node.Driver.Proc}
		t.claims, t.devices = scheduleClaims(ctx, b, node.Spec.Name, n.claims)
		for _, c := range t.claims {
			env.ours[c.Name] = claimTarget{t, c}
		}
	}
	node := suite.StartNode(b, NodeSpec{Name: "bench-mem", Machine: "dgx-a100-40gb", ConsumableMemory: true})
	var claims []*resourceapi.ResourceClaim
	for i := range burstSize {
		c := claimSpec(fmt.Sprintf("m%03d", i), "gpu.nvidia.com", "", nil)
		c.Spec.Devices.Requests[0].Exactly.Capacity = memoryRequest(burstMemory)
		claims = append(claims, c)
	}
	env.oursBurst = &target{bench: "gpudra", driver: oursDriver, plugin: node.Kubelet, proc: node.Driver.Proc, memory: burstMemory}
	env.oursBurst.claims, env.oursBurst.devices = scheduleClaims(ctx, b, node.Spec.Name, claims)
	if *benchExample {
		env.startExamples(ctx, b)
	}
	return env
}

// scheduleClaims creates the claims and one pod per claim pinned to node, waits until the
// scheduler has allocated them all, and returns them in the order given with the device each
// got.
func scheduleClaims(ctx context.Context, b *testing.B, node string, claims []*resourceapi.ResourceClaim) ([]fakekubelet.Claim, []string) {
	ns := node
	var pods []*corev1.Pod
	for _, c := range claims {
		pods = append(pods, podUsing("p-"+c.Name, c.Name))
	}
	n := &TestNode{Spec: NodeSpec{Name: node}}
	createPodsWithClaims(b, n, ns, claims, pods...)
	scheduled, err := waitScheduled(ctx, ns, len(pods), node)
	if err != nil {
		b.Fatal(err)
	}
	byName := map[string]*resourceapi.ResourceClaim{}
	for _, p := range scheduled {
		for _, c := range p.Claims {
			byName[c.Name] = c
		}
	}
	var out []fakekubelet.Claim
	var devices []string
	for _, c := range claims {
		got := byName[c.Name]
		out = append(out, kubeletClaims(got)...)
		devices = append(devices, got.Status.Allocation.Devices.Results[0].Device)
	}
	return out, devices
}

// startExamples builds (or reuses) the example driver and starts it on two nodes: one with
// serve's API client limits, one with its own defaults (QPS 5, burst 10).
func (e *benchEnv) startExamples(ctx context.Context, b *testing.B) {
	path, err := suite.Bins.ExampleDriverPath(ctx, os.Stdout, false)
	if err != nil {
		b.Fatal(err)
	}
	version := strings.TrimPrefix(filepath.Base(filepath.Dir(path)), "dra-example-driver-")
	kubeconfig, err := exampleCredentials(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, x := range []struct {
		node, bench string
		qps, burst  int
		into        **target
	}{
		{"bench-ex", "example-qps200", 200, 400, &e.ex},
		{"bench-ex5", "example-qps5", 5, 10, &e.exSlow},
	} {
		driver := fmt.Sprintf("%s %s (%d/%d)", exampleName, version, x.qps, x.burst)
		plugin, proc := startExample(ctx, b, path, kubeconfig, x.node, x.qps, x.burst, exampleDevices)
		var claims []*resourceapi.ResourceClaim
		for i := range exampleDevices {
			claims = append(claims, claimSpec(fmt.Sprintf("e%03d", i), exampleDriverName, "", nil))
		}
		t := &target{bench: x.bench, driver: driver, plugin: plugin, proc: proc}
		t.claims, t.devices = scheduleClaims(ctx, b, x.node, claims)
		*x.into = t
	}
}

// exampleCredentials creates the example driver's DeviceClass and a ServiceAccount bound to
// cluster-admin (its chart's RBAC is not the subject here), and writes a kubeconfig with a
// token of that account, so it authenticates like serve does: with a ServiceAccount token.
// Objects that exist already (an earlier benchmark of the same run made them) are kept.
func exampleCredentials(ctx context.Context) (string, error) {
	c := suite.Client
	exists := apierrors.IsAlreadyExists
	dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: exampleDriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == '%s'", exampleDriverName)}}}}}
	if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !exists(err) {
		return "", fmt.Errorf("create DeviceClass %s: %w", dc.Name, err)
	}
	if err := framework.CreateNamespace(ctx, c, exampleNamespace, nil); err != nil && !exists(err) {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: exampleSA}}
	if _, err := c.CoreV1().ServiceAccounts(exampleNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !exists(err) {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: exampleSA},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: exampleSA, Namespace: exampleNamespace}}}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !exists(err) {
		return "", err
	}
	token, err := framework.ServiceAccountToken(ctx, c, exampleNamespace, exampleSA, nil)
	if err != nil {
		return "", err
	}
	path := filepath.Join(suite.Dir, "example.kubeconfig")
	return path, framework.WriteKubeconfig(path, suite.CP.URL, suite.CP.CAFile, framework.Credentials{Token: token})
}

// startExample creates a Ready node and runs the example driver's kubelet plugin for it with
// fake GPUs, as its DaemonSet would (directories below the suite's), then registers it as
// kubelet does. The process is stopped when b ends.
func startExample(ctx context.Context, b *testing.B, path, kubeconfig, node string, qps, burst, devices int) (*fakekubelet.Plugin, *framework.Process) {
	if _, err := framework.CreateReadyNode(ctx, suite.Client, node, nil); err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(suite.Dir, "x", node)
	regDir, pluginsDir := filepath.Join(dir, "reg"), filepath.Join(dir, "plugins")
	for _, d := range []string{regDir, pluginsDir, filepath.Join(suite.Dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	proc, err := framework.StartProcess("example driver "+node, filepath.Join(suite.Dir, "logs", node+".log"), nil, path,
		"--node-name="+node, "--cdi-root="+filepath.Join(dir, "cdi"),
		"--kubelet-registrar-directory-path="+regDir, "--kubelet-plugins-directory-path="+pluginsDir,
		"--kubeconfig="+kubeconfig, "--kube-api-qps="+strconv.Itoa(qps), "--kube-api-burst="+strconv.Itoa(burst),
		"--num-devices="+strconv.Itoa(devices), "--pod-uid="+uuid.NewString())
	if err != nil {
		b.Fatal(err)
	}
	var plugin *fakekubelet.Plugin
	b.Cleanup(func() {
		if plugin != nil {
			_ = plugin.Close()
		}
		if err := proc.Stop(10 * time.Second); err != nil {
			b.Errorf("example driver on %s: %v", node, err)
		}
	})
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := proc.Exited(); exited {
			return false, fmt.Errorf("example driver exited: %v\n%s", err, proc.Tail(3000))
		}
		sockets, _ := fakekubelet.Sockets(regDir)
		if len(sockets) == 0 {
			return false, nil
		}
		p, err := fakekubelet.Register(ctx, sockets[0])
		plugin = p
		return err == nil, nil
	})
	if err != nil {
		b.Fatalf("example driver on %s never registered: %v; log %s", node, err, proc.LogFile)
	}
	return plugin, proc
}
