package kubenode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
)

// SandboxImage is the pause image containerd runs every pod sandbox from. The node tier builds
// it (a static program that waits for a signal) under containerd v2.4's default name, so that
// the configuration below only states it.
const SandboxImage = "registry.k8s.io/pause:3.10.2"

// Containerd is a running containerd whose root, state, socket and CNI configuration all live
// below Dir. Its CRI plugin reads CDI specs from CDIDir.
type Containerd struct {
	// Dir holds everything containerd writes.
	Dir string
	// Socket is containerd's gRPC socket (kubelet's container runtime endpoint).
	Socket string
	// CDIDir is where the CRI plugin reads CDI specs (the chart's cdiRoot).
	CDIDir string
	// Proc is the containerd process.
	Proc *framework.Process

	bins *binaries.Node
}

// containerdConfig is containerd v2's configuration for this node. Every setting that differs
// from containerd's defaults is here for a reason that docs/install.md ("The node tier") lists:
//   - restrict_oom_score_adj: processes on this machine cannot lower oom_score_adj; without it
//     every sandbox fails in runc ("can't get final child's PID from pipe").
//   - disable_apparmor: no AppArmor on the machine.
//   - cdi_spec_dirs: the directory the driver writes specs to (a production node: /var/run/cdi).
//   - CNI: a PodNetwork (a bridge on a private subnet that never leaves the machine), or
//     loopback only, where every pod must use the host's network.
//   - runc from Debian, cgroupfs (the machine runs cgroup v1 without systemd as init).
const containerdConfig = `version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  disable_apparmor = true
  cdi_spec_dirs = [%[6]q]
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %[7]q
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "/usr/sbin/runc"
      SystemdCgroup = false

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
`

// loopbackCNI is the network configuration of a node without a PodNetwork: containerd's CRI
// wants one to report the runtime's network ready, and every pod then uses hostNetwork.
const loopbackCNI = `{"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}`

// StartContainerd starts containerd from bins with everything below dir and waits until it
// answers. cdiDir is where it reads CDI specs; network, when not nil, is the pods' network
// (see writeCNIConfig).
func StartContainerd(ctx context.Context, bins *binaries.Node, dir, cdiDir string, network *PodNetwork) (*Containerd, error) {
	c := &Containerd{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), CDIDir: cdiDir, bins: bins}
	cniDir := filepath.Join(dir, "cni")
	for _, d := range []string{dir, cniDir, cdiDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := writeCNIConfig(cniDir, network); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config.toml")
	body := fmt.Sprintf(containerdConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Socket,
		filepath.Join(dir, "ttrpc.sock"), SandboxImage, cdiDir, cniDir)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return nil, err
	}
	// containerd finds its shim on PATH.
	env := []string{"PATH=" + bins.ContainerdDir + ":" + os.Getenv("PATH")}
	p, err := framework.StartProcess("containerd", filepath.Join(dir, "containerd.log"), env,
		bins.Path(binaries.Containerd), "--config", cfg, "--log-level", "info")
	if err != nil {
		return nil, err
	}
	c.Proc = p
	if err := c.waitReady(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Containerd) waitReady(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := c.Proc.Exited(); exited {
			return false, fmt.Errorf("containerd exited: %v\n%s", err, c.Proc.Tail(4000))
		}
		_, last = c.Ctr(ctx, "version")
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("containerd not ready (last: %v): %w; log %s", last, err, c.Proc.LogFile)
	}
	return nil
}

// Ctr runs ctr against this containerd in the CRI plugin's namespace (k8s.io).
func (c *Containerd) Ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bins.Path(binaries.Ctr), append([]string{"--address", c.Socket, "--namespace", "k8s.io"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// ImportImages imports a docker-archive tarball (WriteArchive) into the k8s.io namespace, where
// kubelet finds the images without pulling.
func (c *Containerd) ImportImages(ctx context.Context, archive string) error {
	_, err := c.Ctr(ctx, "images", "import", "--platform", "linux/amd64", archive)
	return err
}

// Stop stops containerd. Containers it started keep running in their shims, as on a node whose
// containerd restarts; StopAll removes them.
func (c *Containerd) Stop() {
	if c.Proc != nil {
		_ = c.Proc.Stop(10 * time.Second)
	}
}
