package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// The ComputeDomain rack: one fake NVL domain of cdRackNodes nodes in cdRackCliques cliques,
// shared by the TestComputeDomain… tests (each makes its own domains).
const (
	cdRackNodes   = 10
	cdRackCliques = 2
	// cdDriverNS is the driver's namespace, where the controller puts the IMEX daemons.
	cdDriverNS = "cd-driver"
	// cdDaemonSA is the daemon pods' ServiceAccount.
	cdDaemonSA = "cd-daemon"
	// cdChannelMajor is the fake /proc/devices major of nvidia-caps-imex-channels.
	cdChannelMajor = 511
)

// cdRack is the shared rack: Nodes with a plugin process each, the controller, and a fake
// kubelet for the daemon pods (it prepares each bound daemon pod's claim and runs its daemon).
type cdRack struct {
	dir, bin, kubeconfig, driverRoot string
	// pluginEnv is added to the plugins' environment.
	pluginEnv []string
	client    client.WithWatch
	nodes     map[string]*cdNode
	names     []string

	mu      sync.Mutex
	daemons map[types.UID]*cdDaemon // by daemon pod UID
	// daemonClaims holds, for each domain UID, the daemon claims ever prepared for it.
	daemonClaims map[types.UID][]fakekubelet.Claim
}

// cdNode is one node of the rack and its plugin.
type cdNode struct {
	name, clique, podIP string
	cdiDir, devRoot     string
	proc                *framework.Process
	plugin              *fakekubelet.Plugin
	gone                bool // deleted by a test; its plugin is stopped
}

// cdDaemon is a daemon pod the fake kubelet runs.
type cdDaemon struct {
	pod   *corev1.Pod
	node  *cdNode
	claim fakekubelet.Claim
	dir   string // the /imexd host path
	proc  *framework.Process
	// reported is set once the daemon's exit was printed.
	reported bool
}

// rackTB hands imextest a TempDir that outlives the test that builds the rack.
type rackTB struct {
	testing.TB
	dir string
}

func (r rackTB) TempDir() string {
	d, err := os.MkdirTemp(r.dir, "root")
	if err != nil {
		r.Fatal(err)
	}
	return d
}

// computeDomainRack returns the suite's rack, building it on first use.
func computeDomainRack(t *testing.T) *cdRack {
	t.Helper()
	s := suite
	s.cdOnce.Do(func() {
		start := time.Now()
		s.cdRack, s.cdErr = newRack(t)
		t.Logf("ComputeDomain rack ready in %s", time.Since(start).Round(100*time.Millisecond))
	})
	if s.cdErr != nil {
		t.Fatalf("ComputeDomain rack: %v", s.cdErr)
	}
	if s.cdRack == nil { // the build stopped the test that ran it (t.Fatal inside the Once)
		t.Fatal("ComputeDomain rack: its build failed in an earlier test; see that test's log")
	}
	return s.cdRack
}

func newRack(t *testing.T) (*cdRack, error) {
	ctx := context.Background()
	r := &cdRack{dir: filepath.Join(suite.Dir, "cd"), kubeconfig: suite.CP.AdminKubeconfig,
		nodes: map[string]*cdNode{}, daemons: map[types.UID]*cdDaemon{}, daemonClaims: map[types.UID][]fakekubelet.Claim{}}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	if err := applyComputeDomainAPI(ctx); err != nil {
		return nil, err
	}
	if err := r.build(ctx); err != nil {
		return nil, err
	}
	r.driverRoot = imextest.NewDriverRoot(rackTB{TB: t, dir: r.dir})
	// controller-runtime's client logs through its package logger, which it wants set.
	ctrllog.SetLogger(logr.Discard())
	scheme := runtime.NewScheme()
	if err := cdv1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	var err error
	if r.client, err = client.NewWithWatch(suite.CP.Admin, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	// The CRD takes a moment to be served after it is Established.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return r.client.List(ctx, &cdv1beta1.ComputeDomainList{}) == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("ComputeDomains never served: %w", err)
	}
	if err := r.driverNamespace(ctx); err != nil {
		return nil, err
	}
	if err := r.startNodes(ctx); err != nil {
		return nil, err
	}
	if err := r.startController(); err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.kubelet(kctx) }()
	suite.onTeardown(func() { cancel(); <-done; r.stop() })
	return r, nil
}

// build builds the driver as `make build-cd` does.
func (r *cdRack) build(ctx context.Context) error {
	r.bin = filepath.Join(r.dir, "compute-domain-driver")
	out, err := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", suite.Repo, "build-cd", "CD_BIN="+r.bin).CombinedOutput()
	if err != nil {
		return fmt.Errorf("make build-cd: %w\n%s", err, out)
	}
	return nil
}

// driverNamespace creates the driver's namespace and the daemons' ServiceAccount.
func (r *cdRack) driverNamespace(ctx context.Context) error {
	if err := framework.CreateNamespace(ctx, suite.Client, cdDriverNS, nil); err != nil {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: cdDaemonSA, Namespace: cdDriverNS}}
	_, err := suite.Client.CoreV1().ServiceAccounts(cdDriverNS).Create(ctx, sa, metav1.CreateOptions{})
	return err
}

// startNodes creates the rack's Nodes and starts and registers their plugins, concurrently.
func (r *cdRack) startNodes(ctx context.Context) error {
	domain, err := gputest.NVLDomain("nvl", cdRackNodes, cdRackCliques)
	if err != nil {
		return err
	}
	for i, dn := range domain {
		n := &cdNode{name: dn.Name, clique: dn.CliqueID(), podIP: "10.200.0." + strconv.Itoa(10+i)}
		r.nodes[n.name] = n
		r.names = append(r.names, n.name)
	}
	errs := make([]error, len(r.names))
	var wg sync.WaitGroup
	for i, name := range r.names {
		wg.Go(func() { errs[i] = r.startNode(ctx, r.nodes[name]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startNode creates node n (Ready), its directories, a fake /proc/devices, and starts its plugin.
func (r *cdRack) startNode(ctx context.Context, n *cdNode) error {
	if _, err := framework.CreateReadyNode(ctx, suite.Client, n.name, nil); err != nil {
		return err
	}
	dir := filepath.Join(r.dir, n.name)
	n.cdiDir, n.devRoot = filepath.Join(dir, "cdi"), filepath.Join(dir, "dev")
	for _, d := range []string{"cdi", "dev", "state", "plugin", "reg"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	procDevices := filepath.Join(dir, "devices")
	devices := fmt.Sprintf("Character devices:\n  1 mem\n195 nvidia\n%d %s\n\nBlock devices:\n  8 sd\n", cdChannelMajor, computedomain.ChannelProcName)
	if err := os.WriteFile(procDevices, []byte(devices), 0o644); err != nil {
		return err
	}
	var err error
	n.proc, err = framework.StartProcess("plugin "+n.name, filepath.Join(dir, "plugin.log"), r.pluginEnv, r.bin, "plugin",
		"--kubeconfig="+r.kubeconfig, "--node-name="+n.name, "--cdi-root="+n.cdiDir,
		"--state-dir="+filepath.Join(dir, "state"), "--plugin-dir="+filepath.Join(dir, "plugin"),
		"--registrar-dir="+filepath.Join(dir, "reg"), "--dev-root="+n.devRoot, "--proc-devices="+procDevices,
		"--nvml=fake", "--fake-clique="+n.clique)
	if err != nil {
		return err
	}
	n.plugin, err = registerPlugin(ctx, n.proc, filepath.Join(dir, "reg"))
	return err
}

// registerPlugin waits for the plugin's registration socket and registers it as kubelet does.
func registerPlugin(ctx context.Context, proc *framework.Process, regDir string) (*fakekubelet.Plugin, error) {
	socket := filepath.Join(regDir, computedomain.DriverName+"-reg.sock")
	var p *fakekubelet.Plugin
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := proc.Exited(); exited {
			return false, fmt.Errorf("%s exited: %v\n%s", proc.Name, err, proc.Tail(3000))
		}
		p, last = fakekubelet.Register(ctx, socket)
		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s never registered (last: %v): %w", proc.Name, last, err)
	}
	return p, nil
}

// startController starts the ComputeDomain controller with the admin kubeconfig (the chart's
// least-privilege RBAC is not this tier's subject yet).
func (r *cdRack) startController() error {
	_, err := r.track(framework.StartProcess("cd-controller", filepath.Join(r.dir, "controller.log"), nil, r.bin, "controller",
		"--kubeconfig="+r.kubeconfig, "--namespace="+cdDriverNS, "--daemon-image=example.invalid/cd:test",
		"--daemon-service-account="+cdDaemonSA, "--leader-elect=false", "--health-probe-bind-address=0",
		"--metrics-bind-address=0"))
	return err
}

// track stops p at teardown.
func (r *cdRack) track(p *framework.Process, err error) (*framework.Process, error) {
	if err == nil {
		suite.onTeardown(func() { _ = p.Stop(5 * time.Second) })
	}
	return p, err
}

// stop stops the daemons and plugins.
func (r *cdRack) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.daemons {
		_ = d.proc.Stop(5 * time.Second)
	}
	for _, n := range r.nodes {
		if n.plugin != nil {
			_ = n.plugin.Close()
		}
		if n.proc != nil {
			_ = n.proc.Stop(5 * time.Second)
		}
	}
}

// node returns the live rack node called name, or nil.
func (r *cdRack) node(name string) *cdNode {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.nodes[name]; n != nil && !n.gone {
		return n
	}
	return nil
}

// kubelet acts as each rack node's kubelet for the daemon pods until ctx ends: it prepares the
// claim of each bound daemon pod and starts its daemon, and for a pod being deleted stops the
// daemon, unprepares the claim and confirms the deletion.
func (r *cdRack) kubelet(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pods, err := suite.Client.CoreV1().Pods(cdDriverNS).List(ctx, metav1.ListOptions{LabelSelector: computedomain.NodeLabel})
		if err != nil {
			continue
		}
		seen := map[types.UID]bool{}
		for i := range pods.Items {
			pod := &pods.Items[i]
			seen[pod.UID] = true
			if err := r.syncDaemonPod(ctx, pod); err != nil && ctx.Err() == nil {
				fmt.Printf("e2e: fake kubelet: daemon pod %s on %s: %v\n", pod.Name, pod.Spec.NodeName, err)
			}
		}
		r.mu.Lock()
		var gone []*cdDaemon
		for uid, d := range r.daemons {
			if !seen[uid] {
				gone = append(gone, d)
			}
			if exited, err := d.proc.Exited(); exited && !d.reported {
				d.reported = true
				fmt.Printf("e2e: fake kubelet: the daemon on %s exited: %v\n%s\n", d.node.name, err, d.proc.Tail(2000))
			}
		}
		r.mu.Unlock()
		for _, d := range gone {
			r.stopDaemon(ctx, d)
		}
	}
}

// syncDaemonPod starts the daemon of a bound pod, or stops that of a pod being deleted.
func (r *cdRack) syncDaemonPod(ctx context.Context, pod *corev1.Pod) error {
	r.mu.Lock()
	d := r.daemons[pod.UID]
	r.mu.Unlock()
	switch {
	case pod.DeletionTimestamp != nil && d != nil:
		r.stopDaemon(ctx, d)
		return nil
	case pod.DeletionTimestamp != nil:
		return forceDelete(ctx, pod)
	case d != nil || pod.Spec.NodeName == "":
		return nil
	}
	n := r.node(pod.Spec.NodeName)
	if n == nil {
		return nil // not a rack node, or one a test removed
	}
	return r.startDaemon(ctx, pod, n)
}

// startDaemon prepares pod's daemon claim on n and starts the daemon with the pod's
// environment and the claim's CDI edits.
func (r *cdRack) startDaemon(ctx context.Context, pod *corev1.Pod, n *cdNode) error {
	claim, err := podClaim(ctx, pod, "daemon")
	if err != nil {
		return err
	}
	resp, err := n.plugin.Prepare(ctx, claim)
	if err := fakekubelet.PrepareErrors(resp, err, claim); err != nil {
		return err
	}
	cdiEnv, dir, err := daemonClaimEdits(n, string(claim.UID))
	if err != nil {
		return err
	}
	env := append(daemonEnv(pod, n), cdiEnv...)
	d := &cdDaemon{pod: pod, node: n, claim: claim, dir: dir}
	d.proc, err = framework.StartProcess("daemon "+n.name, filepath.Join(r.dir, n.name, "daemon.log"), env, r.bin, "daemon",
		"--kubeconfig="+r.kubeconfig, "--dir="+dir, "--driver-root="+r.driverRoot)
	if err != nil {
		return err
	}
	domain := types.UID(envValue(env, "COMPUTE_DOMAIN_UUID"))
	r.mu.Lock()
	r.daemons[pod.UID] = d
	r.daemonClaims[domain] = append(r.daemonClaims[domain], claim)
	r.mu.Unlock()
	fmt.Printf("e2e: fake kubelet: started the IMEX daemon of %s on %s (pid %d)\n", pod.Name, n.name, d.proc.Pid())
	return nil
}

// stopDaemon stops d's daemon (SIGTERM, as kubelet stops a container), unprepares its claim and
// confirms the pod's deletion.
func (r *cdRack) stopDaemon(ctx context.Context, d *cdDaemon) {
	if err := d.proc.Stop(20 * time.Second); err != nil {
		fmt.Printf("e2e: fake kubelet: daemon on %s: %v\n", d.node.name, err)
	}
	if r.node(d.node.name) != nil {
		resp, err := d.node.plugin.Unprepare(ctx, d.claim)
		if err := fakekubelet.UnprepareErrors(resp, err, d.claim); err != nil {
			fmt.Printf("e2e: fake kubelet: unprepare %s on %s: %v\n", d.claim.Name, d.node.name, err)
			return // retried on the next round
		}
	}
	if err := forceDelete(ctx, d.pod); err != nil {
		fmt.Printf("e2e: fake kubelet: %v\n", err)
	}
	r.mu.Lock()
	delete(r.daemons, d.pod.UID)
	r.mu.Unlock()
}

// forceDelete deletes pod at once (grace 0), as kubelet confirms a pod's termination.
func forceDelete(ctx context.Context, pod *corev1.Pod) error {
	err := suite.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// daemonEnv is the environment kubelet gives the daemon container of pod on n: the literal
// values, NODE_NAME and POD_IP (the node's own address; the daemon refuses a loopback one, and
// the fake nvidia-imex only checks it, so it need not be this machine's).
func daemonEnv(pod *corev1.Pod, n *cdNode) []string {
	var env []string
	for _, e := range pod.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env = append(env, e.Name+"="+n.name)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			env = append(env, e.Name+"="+n.podIP)
		}
	}
	return env
}

// envValue returns the last value of name in env.
func envValue(env []string, name string) string {
	v := ""
	for _, e := range env {
		if after, ok := strings.CutPrefix(e, name+"="); ok {
			v = after
		}
	}
	return v
}

// podClaim names the ResourceClaim made for pod's claim entry (from the pod's status).
func podClaim(ctx context.Context, pod *corev1.Pod, entry string) (fakekubelet.Claim, error) {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name != entry || s.ResourceClaimName == nil {
			continue
		}
		c, err := suite.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return fakekubelet.Claim{}, err
		}
		if c.Status.Allocation == nil {
			return fakekubelet.Claim{}, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
		}
		return fakekubelet.Claim{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID)}, nil
	}
	return fakekubelet.Claim{}, fmt.Errorf("pod %s/%s: no ResourceClaim for %q yet", pod.Namespace, pod.Name, entry)
}

// cdClaimSpec reads the CDI spec the plugin of n wrote for a claim.
func cdClaimSpec(n *cdNode, uid string) (*cdispecs.Spec, error) {
	path, err := claimSpecPath(n, uid)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the CDI spec of claim %s on %s: %w", uid, n.name, err)
	}
	spec := &cdispecs.Spec{}
	if err := json.Unmarshal(data, spec); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

// daemonClaimEdits are what the CDI spec of the daemon claim uid on n gives the daemon's
// container: its environment, and the host directory it mounts at DaemonConfigDir.
func daemonClaimEdits(n *cdNode, uid string) (env []string, dir string, err error) {
	spec, err := cdClaimSpec(n, uid)
	if err != nil {
		return nil, "", err
	}
	for _, dev := range spec.Devices {
		env = append(env, dev.ContainerEdits.Env...)
		for _, m := range dev.ContainerEdits.Mounts {
			if m.ContainerPath == computedomain.DaemonConfigDir {
				dir = m.HostPath
			}
		}
	}
	if dir == "" {
		return nil, "", fmt.Errorf("the CDI spec of daemon claim %s on %s mounts nothing at %s", uid, n.name, computedomain.DaemonConfigDir)
	}
	return env, dir, nil
}

// claimSpecPath is where the plugin of n writes the CDI spec of a claim.
func claimSpecPath(n *cdNode, uid string) (string, error) {
	w, err := cdi.NewWriter(cdi.WithSpecDir(n.cdiDir), cdi.WithWriterKind(computedomain.DriverName, "claim"))
	if err != nil {
		return "", err
	}
	return w.SpecPath(uid)
}

// daemonOf returns the daemon the fake kubelet runs for domain uid on node, or nil.
func (r *cdRack) daemonOf(uid types.UID, node string) *cdDaemon {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.daemons {
		if d.node.name == node && daemonDomain(d) == uid {
			return d
		}
	}
	return nil
}

// daemonDomain is the domain UID of d's pod.
func daemonDomain(d *cdDaemon) types.UID {
	return types.UID(d.pod.Labels[computedomain.NodeLabel])
}

// removeNode deletes Node name and stops its plugin, as a node that leaves the cluster.
func (r *cdRack) removeNode(ctx context.Context, name string) error {
	r.mu.Lock()
	n := r.nodes[name]
	n.gone = true
	r.mu.Unlock()
	if err := suite.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	_ = n.plugin.Close()
	return n.proc.Stop(10 * time.Second)
}
