package binaries

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Names of the node tier's binaries: kubelet comes from the pinned k8s.io/kubernetes like the
// control plane; containerd, its runc shim and ctr from the containerd version that the nested
// module ContainerdModuleDir pins.
const (
	Kubelet        = "kubelet"
	Containerd     = "containerd"
	ContainerdShim = "containerd-shim-runc-v2"
	Ctr            = "ctr"
)

// The containerd the node tier runs: built from the Go module proxy at the version pinned by a
// nested module of its own, so that it keeps the dependencies it was released with (as the
// example driver does).
const (
	// ContainerdModuleDir is that nested module, relative to test/e2e.
	ContainerdModuleDir = "tools/containerd"
	containerdModule    = "github.com/containerd/containerd/v2"
)

// Node is the set of node binaries: kubelet beside the control plane's binaries, containerd's
// three in a directory keyed by containerd's version (it goes first on containerd's PATH, where
// containerd looks for its shim).
type Node struct {
	// Kubelet is the kubelet binary's path.
	Kubelet string
	// ContainerdDir holds containerd, containerd-shim-runc-v2 and ctr.
	ContainerdDir string
	// ContainerdVersion is the pinned containerd version, e.g. v2.4.2.
	ContainerdVersion string
}

// Path returns the path of kubelet, containerd, its shim or ctr.
func (n *Node) Path(name string) string {
	if name == Kubelet {
		return n.Kubelet
	}
	return filepath.Join(n.ContainerdDir, name)
}

// BuildNode builds (or reuses from the cache) kubelet and containerd's binaries, printing one
// line per binary and a heartbeat while a build runs.
func (s *Set) BuildNode(ctx context.Context, out io.Writer, rebuild bool) (*Node, error) {
	kubelet := Binary{Name: Kubelet, Package: kubernetesModule + "/cmd/kubelet", VersionMarker: "Kubernetes " + s.KubernetesVersion}
	flags, err := versionLDFlags(s.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	kubelet.LDFlags = flags
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the binary cache: %w", err)
	}
	if err := s.buildOne(ctx, out, kubelet, rebuild); err != nil {
		return nil, err
	}
	modDir := filepath.Join(s.ModuleDir, ContainerdModuleDir)
	versions, err := moduleVersions(ctx, modDir, containerdModule)
	if err != nil {
		return nil, err
	}
	n := &Node{Kubelet: s.Path(Kubelet), ContainerdVersion: versions[containerdModule]}
	n.ContainerdDir = filepath.Join(filepath.Dir(s.Dir), "containerd-"+n.ContainerdVersion)
	c := &Set{Dir: n.ContainerdDir, ModuleDir: modDir}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the containerd cache: %w", err)
	}
	// containerd's own release builds stamp the version the same way.
	stamp := []string{"-X " + containerdModule + "/version.Version=" + n.ContainerdVersion}
	for _, b := range []Binary{
		{Name: Containerd, Package: containerdModule + "/cmd/containerd", VersionMarker: n.ContainerdVersion, LDFlags: stamp},
		{Name: ContainerdShim, Package: containerdModule + "/cmd/containerd-shim-runc-v2", VersionMarker: n.ContainerdVersion, LDFlags: stamp},
		{Name: Ctr, Package: containerdModule + "/cmd/ctr", VersionMarker: n.ContainerdVersion, LDFlags: stamp},
	} {
		if err := c.buildOne(ctx, out, b, rebuild); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// buildOne builds b unless the cache has a good copy (or rebuild is set).
func (s *Set) buildOne(ctx context.Context, out io.Writer, b Binary, rebuild bool) error {
	if !rebuild && s.cached(ctx, b) {
		fmt.Fprintf(out, "  %-24s cached\n", b.Name)
		return nil
	}
	start := time.Now()
	fmt.Fprintf(out, "  %-24s building %s ...\n", b.Name, b.Package)
	if err := s.build(ctx, out, b); err != nil {
		return err
	}
	if !s.cached(ctx, b) {
		return fmt.Errorf("%s built, but `%s --version` does not say %q: check the -X version flags", b.Name, b.Name, b.VersionMarker)
	}
	fmt.Fprintf(out, "  %-24s built in %s\n", b.Name, time.Since(start).Round(time.Second))
	return nil
}

// HostTools are the node parts this tier takes from Debian's packages rather than building:
// runc (containerd's OCI runtime), the CNI plugins (bridge, host-local, loopback) and ip, which
// makes the pod network's bridge.
var HostTools = []struct{ Path, Package string }{
	{"/usr/sbin/runc", "runc"},
	{"/usr/lib/cni/bridge", "containernetworking-plugins"},
	{"/bin/ip", "iproute2"},
}

// EnsureHostTools installs the Debian packages of HostTools that are missing (apt-get; this
// tier runs as root), printing what it does.
func EnsureHostTools(ctx context.Context, out io.Writer) error {
	var missing []string
	for _, t := range HostTools {
		if _, err := os.Stat(t.Path); err != nil {
			missing = append(missing, t.Package)
		}
	}
	if len(missing) == 0 {
		fmt.Fprintf(out, "  %-24s installed\n", "runc, CNI plugins, ip")
		return nil
	}
	fmt.Fprintf(out, "  %-24s apt-get install %s ...\n", "runc, CNI plugins, ip", strings.Join(missing, " "))
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, buf.String())
		}
	}
	for _, t := range HostTools {
		if _, err := os.Stat(t.Path); err != nil {
			return fmt.Errorf("%s: not there after installing package %s: %w", t.Path, t.Package, err)
		}
	}
	return nil
}
