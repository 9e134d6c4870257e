package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
)

// DisabledControllers are the kube-controller-manager controllers the harness turns off: with
// no kubelet, Nodes never report heartbeats, so node lifecycle and taint eviction would mark
// them NotReady and evict every pod.
var DisabledControllers = []string{"node-lifecycle-controller", "taint-eviction-controller", "device-taint-eviction-controller"}

// ServiceAccountIssuer is the issuer of the harness's ServiceAccount tokens.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// ControlPlane is etcd, kube-apiserver, kube-scheduler and kube-controller-manager running on
// 127.0.0.1 with free ports, client-certificate authentication, RBAC authorization and
// ServiceAccount token issuing. Build one with StartControlPlane; Stop ends it.
type ControlPlane struct {
	// Dir holds certificates, kubeconfigs, etcd's data and LogDir.
	Dir string
	// LogDir holds one log file per component.
	LogDir string
	// URL is the API server's https URL.
	URL string
	// CAFile is the CA that signed the API server's serving certificate.
	CAFile string
	// AdminKubeconfig is a kubeconfig for user "admin" in group system:masters.
	AdminKubeconfig string
	// Admin is the rest.Config of AdminKubeconfig.
	Admin *rest.Config

	pki           *pki
	procs         []*Process
	cfg           controlPlaneConfig
	schedulerPort int
}

// ControlPlaneOption configures StartControlPlane.
type ControlPlaneOption func(*controlPlaneConfig)

type controlPlaneConfig struct {
	schedulerFlags []string
	deferScheduler bool
	featureGates   string
	allControllers bool
	servingIPs     []net.IP
}

// WithServingIPs adds addresses to the API server's serving certificate: the addresses of a
// forwarder (kubenode.Forwarder) through which pods without the host's network reach it.
func WithServingIPs(ips ...net.IP) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.servingIPs = append(c.servingIPs, ips...) }
}

// WithAllControllers runs kube-controller-manager with every default controller, node lifecycle
// and taint eviction included: for nodes whose kubelet is real and sends heartbeats (the node
// tier), which need the node lifecycle controller to lift their not-ready taint.
func WithAllControllers() ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.allControllers = true }
}

// WithSchedulerFlags appends flags to kube-scheduler's command line (later flags win), for
// example "--kube-api-qps=5000" for a scale test, as upstream scheduler_perf raises its client's
// limits.
func WithSchedulerFlags(flags ...string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.schedulerFlags = append(c.schedulerFlags, flags...) }
}

// WithFeatureGates runs kube-apiserver, kube-scheduler and kube-controller-manager with
// --feature-gates=gates (for example "DRAPartitionableDevices=false"), as a cluster that changes
// a gate changes it on every component.
func WithFeatureGates(gates string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.featureGates = gates }
}

// gateFlags is the --feature-gates flag of WithFeatureGates, none without it.
func (c *controlPlaneConfig) gateFlags() []string {
	if c.featureGates == "" {
		return nil
	}
	return []string{"--feature-gates=" + c.featureGates}
}

// WithDeferredScheduler starts everything but kube-scheduler; StartScheduler starts it later.
// A throughput test creates its pending pods first, so that it times the scheduler alone.
func WithDeferredScheduler() ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.deferScheduler = true }
}

// StartControlPlane starts the components from bins in dir (created if missing) and returns
// once the API server is ready, the scheduler and controller-manager answer their health
// checks and the default namespace has its ServiceAccount. On error, what started is stopped.
func StartControlPlane(ctx context.Context, bins *binaries.Set, dir string, opts ...ControlPlaneOption) (cp *ControlPlane, err error) {
	cp = &ControlPlane{Dir: dir, LogDir: filepath.Join(dir, "logs")}
	for _, o := range opts {
		o(&cp.cfg)
	}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	if err := os.MkdirAll(cp.LogDir, 0o755); err != nil {
		return nil, err
	}
	if cp.pki, err = newPKI(filepath.Join(dir, "pki")); err != nil {
		return nil, err
	}
	cp.CAFile = cp.pki.CAFile
	ports, err := FreePorts(5)
	if err != nil {
		return nil, err
	}
	etcdURL, err := cp.startEtcd(bins, ports[0], ports[1])
	if err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, bins, etcdURL, ports[2]); err != nil {
		return nil, err
	}
	cp.schedulerPort = ports[3]
	if !cp.cfg.deferScheduler {
		if err := cp.startScheduler(bins); err != nil {
			return nil, err
		}
	}
	if err := cp.startControllerManager(bins, ports[4]); err != nil {
		return nil, err
	}
	if !cp.cfg.deferScheduler {
		if err := cp.waitHealthy(ctx, binaries.KubeScheduler, cp.schedulerPort); err != nil {
			return nil, err
		}
	}
	if err := cp.waitHealthy(ctx, binaries.KubeControllerManager, ports[4]); err != nil {
		return nil, err
	}
	return cp, cp.waitDefaultServiceAccount(ctx)
}

// StartScheduler starts kube-scheduler after StartControlPlane was given WithDeferredScheduler,
// and waits for its health check.
func (cp *ControlPlane) StartScheduler(ctx context.Context, bins *binaries.Set) error {
	if !cp.cfg.deferScheduler {
		return errors.New("start kube-scheduler: the control plane started it already (no WithDeferredScheduler)")
	}
	if cp.Process(binaries.KubeScheduler) != nil {
		return errors.New("start kube-scheduler: already started")
	}
	if err := cp.startScheduler(bins); err != nil {
		return err
	}
	return cp.waitHealthy(ctx, binaries.KubeScheduler, cp.schedulerPort)
}

// SchedulerURL is the https URL of kube-scheduler's secure port (/metrics, /debug/pprof; a
// client certificate of the admin user is authorized).
func (cp *ControlPlane) SchedulerURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(cp.schedulerPort)
}

func (cp *ControlPlane) start(name string, args ...string) (*Process, error) {
	p, err := StartProcess(name, filepath.Join(cp.LogDir, name+".log"), nil, args...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

func (cp *ControlPlane) startEtcd(bins *binaries.Set, clientPort, peerPort int) (string, error) {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	_, err := cp.start(binaries.Etcd, bins.Path(binaries.Etcd),
		"--name=e2e", "--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=e2e="+peer, "--unsafe-no-fsync", "--log-level=warn")
	return client, err
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, bins *binaries.Set, etcdURL string, port int) error {
	serving, err := cp.pki.serving("kube-apiserver", cp.cfg.servingIPs...)
	if err != nil {
		return err
	}
	sa, err := cp.pki.serviceAccountKey()
	if err != nil {
		return err
	}
	p, err := cp.start(binaries.KubeAPIServer, append([]string{bins.Path(binaries.KubeAPIServer),
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + serving.CertFile, "--tls-private-key-file=" + serving.KeyFile,
		"--client-ca-file=" + cp.pki.CAFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + sa.CertFile, "--service-account-signing-key-file=" + sa.KeyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		// Namespaces of the workload tests pin their pods to one node with the
		// scheduler.alpha.kubernetes.io/node-selector annotation, so manifests stay as written.
		"--enable-admission-plugins=PodNodeSelector",
		"--endpoint-reconciler-type=none", "--profiling=false"}, cp.cfg.gateFlags()...)...)
	if err != nil {
		return err
	}
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	admin, err := cp.pki.client("admin", "admin", "system:masters")
	if err != nil {
		return err
	}
	cp.AdminKubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := WriteKubeconfig(cp.AdminKubeconfig, cp.URL, cp.CAFile, Credentials{CertFile: admin.CertFile, KeyFile: admin.KeyFile}); err != nil {
		return err
	}
	if cp.Admin, err = clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig); err != nil {
		return err
	}
	cp.Admin.QPS, cp.Admin.Burst = 200, 400
	return cp.waitAPIServer(ctx, p)
}

func (cp *ControlPlane) waitAPIServer(ctx context.Context, p *Process) error {
	client, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("kube-apiserver exited: %v\n%s", err, p.Tail(4000))
		}
		_, last = client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready (last error: %v): %w; log %s", last, err, p.LogFile)
	}
	return nil
}

// component writes the kubeconfig of a component that authenticates as user cn in groups orgs.
func (cp *ControlPlane) component(name, cn string, orgs ...string) (string, error) {
	c, err := cp.pki.client(name, cn, orgs...)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	return path, WriteKubeconfig(path, cp.URL, cp.CAFile, Credentials{CertFile: c.CertFile, KeyFile: c.KeyFile})
}

func (cp *ControlPlane) startScheduler(bins *binaries.Set) error {
	kc, err := cp.component("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	args := append([]string{bins.Path(binaries.KubeScheduler),
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(cp.schedulerPort),
		"--cert-dir=" + filepath.Join(cp.Dir, "scheduler-certs")}, append(cp.cfg.gateFlags(), cp.cfg.schedulerFlags...)...)
	_, err = cp.start(binaries.KubeScheduler, args...)
	return err
}

func (cp *ControlPlane) startControllerManager(bins *binaries.Set, port int) error {
	kc, err := cp.component("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	controllers := "*,-" + strings.Join(DisabledControllers, ",-")
	if cp.cfg.allControllers {
		controllers = "*"
	}
	_, err = cp.start(binaries.KubeControllerManager, append([]string{bins.Path(binaries.KubeControllerManager),
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "controller-manager-certs"),
		"--use-service-account-credentials", "--controllers=" + controllers,
		"--service-account-private-key-file=" + filepath.Join(cp.pki.dir, "sa.key"),
		"--root-ca-file=" + cp.pki.CAFile}, cp.cfg.gateFlags()...)...)
	return err
}

func (cp *ControlPlane) waitHealthy(ctx context.Context, name string, port int) error {
	// The components serve /healthz with a self-signed certificate; only reachability matters.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // health probe of a local test process
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range cp.procs {
			if exited, err := p.Exited(); exited {
				return false, fmt.Errorf("%s exited: %v\n%s", p.Name, err, p.Tail(4000))
			}
		}
		resp, err := hc.Get(url)
		if err != nil {
			last = err
			return false, nil
		}
		_ = resp.Body.Close()
		last = fmt.Errorf("status %s", resp.Status)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not healthy on %s (last: %v): %w", name, url, last, err)
	}
	return nil
}

func (cp *ControlPlane) waitDefaultServiceAccount(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return err
	}
	return WaitForServiceAccount(ctx, client, "default", "default")
}

// Stop stops the components, newest first (etcd last), and waits for them to exit.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		_ = cp.procs[i].Stop(10 * time.Second)
	}
	cp.procs = nil
}

// Processes returns the running components, in start order.
func (cp *ControlPlane) Processes() []*Process { return cp.procs }

// Process returns the component named name (binaries.KubeAPIServer, ...), or nil when it is not
// running.
func (cp *ControlPlane) Process(name string) *Process {
	for _, p := range cp.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment ago.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// NodeKubeconfig writes the kubeconfig a kubelet on node uses: a client certificate for user
// system:node:<node> in group system:nodes, which the API server's Node authorizer and the
// NodeRestriction admission plugin limit to that node's objects, as on a production node.
func (cp *ControlPlane) NodeKubeconfig(node string) (string, error) {
	return cp.component("kubelet-"+node, "system:node:"+node, "system:nodes")
}
