package kubenode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
)

// Node is one real Kubernetes node on this machine: containerd with runc and a PodNetwork (or
// loopback CNI only), and a kubelet registered with a control plane. Everything it writes is
// below Dir; Stop removes its containers, mounts and network.
type Node struct {
	// Name is the Node's name.
	Name string
	// Dir holds the containerd and kubelet directories and CDIDir; it is a shared mount (see
	// makeShared), so it is the place for any host path a pod mounts with propagation. Keep it
	// short: the kubelet root below it holds plugin sockets, and unix socket paths are limited
	// to 108 bytes.
	Dir string
	// CDIDir is where containerd reads CDI specs (the chart's cdiRoot).
	CDIDir string
	// Containerd is the node's container runtime.
	Containerd *Containerd
	// Kubelet is the node's kubelet.
	Kubelet *Kubelet
	// Network is the pods' network (nil: loopback only).
	Network *PodNetwork

	// hostDirs are directories outside Dir that kubelet creates and that did not exist before
	// Start, deepest first: Stop removes them again when they are empty.
	hostDirs []string
}

// kubeletHostDir is the one directory kubelet v1.37 creates outside its --root-dir: its device
// manager's socket directory is a constant (pluginapi.DevicePluginPath), not under the root.
const kubeletHostDir = "/var/lib/kubelet/device-plugins"

// missingDirs returns dir and those of its parents that do not exist, deepest first.
func missingDirs(dir string) []string {
	var out []string
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		out = append(out, d)
	}
	return out
}

// Config says how to start a Node.
type Config struct {
	// Name is the Node's name.
	Name string
	// Dir is the node's directory (see Node.Dir).
	Dir string
	// Labels are the Node's labels (kubelet --node-labels).
	Labels map[string]string
	// Images is a docker-archive tarball (WriteArchive) imported into containerd before kubelet
	// starts; it must hold SandboxImage.
	Images string
	// Network is the pods' network, created by Start and removed by Stop; nil: loopback only,
	// every pod must use hostNetwork.
	Network *PodNetwork
}

// Start starts containerd, imports the images and starts kubelet, which registers the Node and
// waits for it to be Ready. On error, what started is stopped.
func Start(ctx context.Context, cp *framework.ControlPlane, bins *binaries.Node, cfg Config) (n *Node, err error) {
	n = &Node{Name: cfg.Name, Dir: cfg.Dir, CDIDir: filepath.Join(cfg.Dir, "cdi")}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if err := makeShared(cfg.Dir); err != nil {
		return n, err
	}
	if cfg.Network != nil {
		if err := cfg.Network.Create(ctx); err != nil {
			return n, err
		}
		n.Network = cfg.Network
	}
	if n.Containerd, err = StartContainerd(ctx, bins, filepath.Join(cfg.Dir, "containerd"), n.CDIDir, cfg.Network); err != nil {
		return n, err
	}
	if cfg.Images != "" {
		if err := n.Containerd.ImportImages(ctx, cfg.Images); err != nil {
			return n, err
		}
	}
	n.hostDirs = missingDirs(kubeletHostDir)
	n.Kubelet, err = StartKubelet(ctx, cp, bins, filepath.Join(cfg.Dir, "kubelet"), filepath.Join(cfg.Dir, "r"), cfg.Name, n.Containerd.Socket, cfg.Labels)
	return n, err
}

// Stop stops kubelet, kills every container the node's containerd runs, stops containerd and
// its shims, and unmounts everything mounted below Dir (container root filesystems, volumes),
// so that Dir can be removed. It also removes kubelet's device-plugin directory outside Dir
// when Start found none and it is empty again.
func (n *Node) Stop() {
	if n.Kubelet != nil {
		n.Kubelet.Stop()
	}
	if n.Containerd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n.killContainers(ctx)
		n.Containerd.Stop()
	}
	killProcessesMentioning(n.Dir)
	unmountBelow(n.Dir)
	if n.Network != nil {
		n.Network.Delete()
	}
	if len(n.hostDirs) > 0 && n.hostDirs[0] == kubeletHostDir {
		// The directory is this kubelet's: the socket it leaves there is its own.
		_ = os.Remove(filepath.Join(kubeletHostDir, "kubelet.sock"))
	}
	for _, d := range n.hostDirs {
		_ = os.Remove(d) // only when empty: never what another kubelet put there
	}
}

// makeShared makes dir a mount point of its own with shared propagation, as systemd makes "/"
// on a production node: hostPath volumes with mountPropagation (HostToContainer, Bidirectional)
// need their source on a shared or slave mount, and this machine's "/" is private.
func makeShared(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mount %s on itself: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}

// killContainers kills every task (container process) in containerd's k8s.io namespace.
func (n *Node) killContainers(ctx context.Context) {
	out, err := n.Containerd.Ctr(ctx, "tasks", "list", "--quiet")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(out) {
		_, _ = n.Containerd.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
	}
}

// killProcessesMentioning SIGKILLs every process whose command line names a path below dir
// (containerd's shims, started with the node's socket address) or whose root directory is
// below dir (a container's processes, whose shim may be gone already).
func killProcessesMentioning(dir string) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		var pid int
		if _, err := fmt.Sscanf(p.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		root, _ := os.Readlink(filepath.Join("/proc", p.Name(), "root"))
		if strings.Contains(string(cmdline), dir) || strings.HasPrefix(root, dir+"/") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountBelow lazily unmounts every mount point below dir and dir itself, deepest first.
func unmountBelow(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}
