package kubenode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
)

// Kubelet is a running kubelet registered as one Node. Its pod logs and configuration live
// below Dir, its root directory (the chart's kubeletDir) is RootDir.
type Kubelet struct {
	// NodeName is the Node it registers.
	NodeName string
	// Dir holds PodLogsDir, its configuration and its log.
	Dir string
	// RootDir is kubelet's --root-dir: plugins/ and plugins_registry/ are below it. Keep it
	// short: a plugin's rolling-update registration socket,
	// plugins_registry/<driver>-<pod UID>-reg.sock, is 89 bytes below it for the driver
	// compute-domain.nvidia.com, and a unix socket path holds at most 107.
	RootDir string
	// PodLogsDir holds the containers' logs (<namespace>_<pod>_<uid>/<container>/<n>.log).
	PodLogsDir string
	// HealthzPort is kubelet's /healthz port on 127.0.0.1.
	HealthzPort int
	// Proc is the kubelet process.
	Proc *framework.Process

	args []string
}

// kubeletConfig is the node's KubeletConfiguration. What differs from a production node's, and
// why, is listed in docs/install.md ("The node tier"): this machine runs cgroup v1 (hybrid)
// without systemd as init and has no swap accounting, so QoS cgroups, node-allocatable
// enforcement and eviction are off; kubelet listens on loopback only.
func kubeletConfig(runtimeSocket, podLogsDir string, port, healthzPort int) *kubeletconfig.KubeletConfiguration {
	return &kubeletconfig.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:                  "127.0.0.1",
		Port:                     int32(port),
		ReadOnlyPort:             0,
		HealthzBindAddress:       "127.0.0.1",
		HealthzPort:              ptr.To(int32(healthzPort)),
		ContainerRuntimeEndpoint: "unix://" + runtimeSocket,
		PodLogsDir:               podLogsDir,
		FailCgroupV1:             ptr.To(false),
		CgroupDriver:             "cgroupfs",
		CgroupsPerQOS:            ptr.To(false),
		EnforceNodeAllocatable:   []string{"none"},
		FailSwapOn:               ptr.To(false),
		// Thresholds no run of the tier reaches: a CI machine's full disk must not evict the
		// plugin in the middle of a test.
		EvictionHard:                  map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		LocalStorageCapacityIsolation: ptr.To(false),
		// The images are imported, never pulled: image garbage collection must leave them.
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		ImageGCLowThresholdPercent:  ptr.To(int32(99)),
		Authentication: kubeletconfig.KubeletAuthentication{
			Anonymous: kubeletconfig.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
			Webhook:   kubeletconfig.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:      kubeletconfig.KubeletAuthorization{Mode: kubeletconfig.KubeletAuthorizationModeAlwaysAllow},
		RegisterNode:       ptr.To(true),
		StaticPodPath:      "",
		SyncFrequency:      metav1.Duration{Duration: 10 * time.Second},
		FileCheckFrequency: metav1.Duration{Duration: 10 * time.Second},
	}
}

// StartKubelet starts kubelet as Node nodeName with the labels given, against cp's API server
// and the container runtime at runtimeSocket, with its root directory rootDir and everything
// else below dir, and waits for the Node to be Ready.
func StartKubelet(ctx context.Context, cp *framework.ControlPlane, bins *binaries.Node, dir, rootDir, nodeName, runtimeSocket string, labels map[string]string) (*Kubelet, error) {
	k := &Kubelet{NodeName: nodeName, Dir: dir, RootDir: rootDir, PodLogsDir: filepath.Join(dir, "pod-logs")}
	for _, d := range []string{k.RootDir, k.PodLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	kubeconfig, err := cp.NodeKubeconfig(nodeName)
	if err != nil {
		return nil, err
	}
	ports, err := framework.FreePorts(2)
	if err != nil {
		return nil, err
	}
	k.HealthzPort = ports[1]
	cfg, err := yaml.Marshal(kubeletConfig(runtimeSocket, k.PodLogsDir, ports[0], ports[1]))
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, cfg, 0o644); err != nil {
		return nil, err
	}
	k.args = []string{bins.Kubelet, "--config=" + cfgFile, "--kubeconfig=" + kubeconfig,
		"--root-dir=" + k.RootDir, "--cert-dir=" + filepath.Join(dir, "pki"),
		"--hostname-override=" + nodeName, "--node-ip=127.0.0.1",
		"--node-labels=" + labelFlag(labels), "--v=2"}
	if err := k.start(); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return nil, err
	}
	if err := k.WaitReady(ctx, client); err != nil {
		k.Stop()
		return nil, err
	}
	return k, nil
}

func labelFlag(labels map[string]string) string {
	var l []string
	for k, v := range labels {
		l = append(l, k+"="+v)
	}
	sort.Strings(l)
	return strings.Join(l, ",")
}

func (k *Kubelet) start() error {
	p, err := framework.StartProcess("kubelet "+k.NodeName, filepath.Join(k.Dir, "kubelet.log"), nil, k.args...)
	if err != nil {
		return err
	}
	k.Proc = p
	return nil
}

// WaitReady waits for the Node's Ready condition and for kubelet's /healthz.
func (k *Kubelet) WaitReady(ctx context.Context, client kubernetes.Interface) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := k.Proc.Exited(); exited {
			return false, fmt.Errorf("kubelet exited: %v\n%s", err, k.Proc.Tail(4000))
		}
		node, err := client.CoreV1().Nodes().Get(ctx, k.NodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		last = "no Ready condition"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (last: %s): %w; log %s", k.NodeName, last, err, k.Proc.LogFile)
	}
	return nil
}

// Restart stops kubelet (SIGTERM) and starts it again with the same configuration; pods keep
// running in containerd meanwhile, as on a node whose kubelet is restarted.
func (k *Kubelet) Restart(ctx context.Context, client kubernetes.Interface) error {
	if err := k.Proc.Stop(30 * time.Second); err != nil {
		return fmt.Errorf("stop kubelet: %w", err)
	}
	if err := k.start(); err != nil {
		return err
	}
	return k.WaitReady(ctx, client)
}

// Stop stops kubelet.
func (k *Kubelet) Stop() {
	if k.Proc != nil {
		_ = k.Proc.Stop(30 * time.Second)
	}
}

// ContainerLog returns what container name of pod wrote so far (stdout and stderr, in the CRI
// log format kubelet keeps: "<time> <stream> <tag> <line>"; the line alone is returned), from
// its log files below PodLogsDir, oldest restart first.
func (k *Kubelet) ContainerLog(pod *corev1.Pod, container string) (string, error) {
	dir := filepath.Join(k.PodLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	type logFile struct {
		n    int
		name string
	}
	var files []logFile
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".log"))
		if err == nil {
			files = append(files, logFile{n, e.Name()})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].n < files[j].n })
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if parts := strings.SplitN(line, " ", 4); len(parts) == 4 {
				b.WriteString(parts[3])
				b.WriteByte('\n')
			}
		}
	}
	return b.String(), nil
}
