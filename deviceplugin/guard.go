package deviceplugin

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// DevicePluginSocketPattern matches the sockets the NVIDIA device plugin serves in kubelet's
// device-plugins directory, one per resource (nvidia-gpu.sock, nvidia-mig-1g.10gb.sock).
const DevicePluginSocketPattern = "nvidia-*.sock"

// ConflictError says that the NVIDIA device plugin manages a node's GPUs, so a DRA driver must
// not publish them: the scheduler would hand the same GPU to a pod through the device plugin
// and to a claim through DRA (seed 000's same-device conflict).
type ConflictError struct {
	// Node is the node's name ("" when unknown).
	Node string
	// Evidence lists what shows the device plugin, e.g. "status.capacity nvidia.com/gpu=8".
	Evidence []string
}

// Error implements error.
func (e *ConflictError) Error() string {
	node := "this node"
	if e.Node != "" {
		node = "node " + e.Node
	}
	return fmt.Sprintf("%s: the NVIDIA device plugin manages the GPUs here (%s); publishing them through DRA as well "+
		"would let a device-plugin pod and a DRA claim get the same GPU, so no GPU is published. Remove the device plugin "+
		"from this node (e.g. label the node so that its DaemonSet no longer selects it), wait until kubelet reports its "+
		"resources as 0, then restart this driver (docs/install.md, \"Migrating from the device plugin\")",
		node, strings.Join(e.Evidence, ", "))
}

// CheckNode returns a *ConflictError when the node's status shows the NVIDIA device plugin:
// status.capacity or status.allocatable has an nvidia.com/ resource above zero. Kubelet
// reports a device plugin's resources there while the plugin is registered and sets them to
// zero once it is gone; resources a DRA DeviceClass maps (extendedResourceName) never appear
// there.
func CheckNode(node *corev1.Node) error {
	if node == nil {
		return errors.New("check node for the NVIDIA device plugin: node is nil")
	}
	var evidence []string
	for _, list := range []struct {
		field string
		rl    corev1.ResourceList
	}{{"status.capacity", node.Status.Capacity}, {"status.allocatable", node.Status.Allocatable}} {
		for name, q := range list.rl {
			if strings.HasPrefix(string(name), ResourcePrefix) && q.Sign() > 0 {
				evidence = append(evidence, fmt.Sprintf("%s %s=%s", list.field, name, q.String()))
			}
		}
	}
	if len(evidence) == 0 {
		return nil
	}
	slices.Sort(evidence)
	return &ConflictError{Node: node.Name, Evidence: evidence}
}

// CheckSocketDir returns a *ConflictError when the NVIDIA device plugin serves on the node: a
// socket matching DevicePluginSocketPattern in kubelet's device-plugins directory (usually
// /var/lib/kubelet/device-plugins) accepts connections. It sees the device plugin before
// kubelet reports its resources in the Node's status; a stale socket nobody listens on is no
// evidence, nor is a missing directory.
func CheckSocketDir(dir string) error {
	matches, err := filepath.Glob(filepath.Join(dir, DevicePluginSocketPattern))
	if err != nil {
		return fmt.Errorf("check %s for the NVIDIA device plugin: %w", dir, err)
	}
	var evidence []string
	for _, path := range matches {
		st, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) || err == nil && st.Mode()&fs.ModeSocket == 0 {
			continue
		}
		if err != nil {
			return fmt.Errorf("check %s for the NVIDIA device plugin: %w", path, err)
		}
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			continue // nobody listens: left behind by a device plugin that is gone
		}
		_ = conn.Close()
		evidence = append(evidence, "device plugin socket "+path+" accepts connections")
	}
	if len(evidence) == 0 {
		return nil
	}
	return &ConflictError{Evidence: evidence}
}
