package kubenode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// PodNetwork is a pod network that never leaves this machine: a Linux bridge holding the
// gateway address of a private /24, and a CNI configuration (bridge plugin, host-local IPAM)
// that gives every pod sandbox an address on it. No NAT, no default route, no IP forwarding:
// pods reach each other and this machine's gateway address, nothing else. It exists so that
// the chart's pods run as on a production node (their own network namespace, kubelet probing
// the pod's IP, two plugin pods during a surge update each with its own metrics port) on a
// machine without a cluster network; the API server, which listens on loopback, is reached
// through a Forwarder on the gateway address.
type PodNetwork struct {
	// Bridge is the bridge interface's name.
	Bridge string
	// Subnet is the pods' subnet; Gateway, its first address, is the bridge's.
	Subnet *net.IPNet
	// Gateway is this machine's address on the bridge.
	Gateway net.IP

	dataDir string
}

// NewPodNetwork names a pod network for the node directory dir: the bridge's name and the
// subnet (in 10.200.0.0/13) are derived from dir, so that networks of different runs do not
// collide. Create makes it.
func NewPodNetwork(dir string) *PodNetwork {
	h := fnv.New32a()
	_, _ = h.Write([]byte(dir))
	sum := h.Sum32()
	ip := net.IPv4(10, byte(200+sum%8), byte(sum>>8), 0).To4()
	return &PodNetwork{
		Bridge:  fmt.Sprintf("gpd%08x", sum)[:11],
		Subnet:  &net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)},
		Gateway: net.IPv4(ip[0], ip[1], ip[2], 1).To4(),
		dataDir: filepath.Join(dir, "cni-ipam"),
	}
}

// Create makes the bridge with the gateway address and brings it up. It fails when an
// interface of that name, or an address in the subnet, exists already.
func (p *PodNetwork) Create(ctx context.Context) error {
	if err := p.checkFree(); err != nil {
		return err
	}
	prefix, _ := p.Subnet.Mask.Size()
	for _, args := range [][]string{
		{"link", "add", p.Bridge, "type", "bridge"},
		{"addr", "add", fmt.Sprintf("%s/%d", p.Gateway, prefix), "dev", p.Bridge},
		{"link", "set", p.Bridge, "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("pod network: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// checkFree refuses a bridge name or subnet that some interface already uses.
func (p *PodNetwork) checkFree() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("pod network: list interfaces: %w", err)
	}
	for _, iface := range ifaces {
		if iface.Name == p.Bridge {
			return fmt.Errorf("pod network: interface %s exists already (a run that was killed? remove it with `ip link del %s`)", p.Bridge, p.Bridge)
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && (p.Subnet.Contains(n.IP) || n.Contains(p.Subnet.IP)) {
				return fmt.Errorf("pod network: subnet %s overlaps %s on %s", p.Subnet, n, iface.Name)
			}
		}
	}
	return nil
}

// Delete removes the bridge (the pods' veth ends went with their sandboxes).
func (p *PodNetwork) Delete() {
	_ = exec.Command("ip", "link", "del", p.Bridge).Run()
}

// CNIConfig is the CNI network configuration list containerd reads: the bridge plugin on
// Bridge (no gateway role, no masquerade: the bridge's address is set by Create) and
// host-local IPAM with its state below the node's directory.
func (p *PodNetwork) CNIConfig() ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "gpudra-node",
		"plugins": []any{map[string]any{
			"type":      "bridge",
			"bridge":    p.Bridge,
			"isGateway": false,
			"ipMasq":    false,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": p.dataDir,
				"ranges":  [][]map[string]string{{{"subnet": p.Subnet.String(), "gateway": p.Gateway.String()}}},
			},
		}},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// Forwarder copies TCP connections from an address on the pod network to a target on this
// machine's loopback: pods reach the API server, which listens on 127.0.0.1, through it.
type Forwarder struct {
	// Addr is the address pods connect to.
	Addr string

	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Forward listens on host (any free port) and forwards every connection to target.
func Forward(host net.IP, target string) (*Forwarder, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("forwarder to %s: %w", target, err)
	}
	f := &Forwarder{Addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

func (f *Forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.wg.Add(1)
		go f.pipe(c)
	}
}

// track adds c to the open connections, or reports false when the forwarder is closed.
func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) pipe(in net.Conn) {
	defer f.wg.Done()
	out, err := net.Dial("tcp", f.target)
	if err != nil {
		_ = in.Close()
		return
	}
	if !f.track(in) || !f.track(out) {
		_, _ = in.Close(), out.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	<-done
	f.mu.Lock()
	delete(f.conns, in)
	delete(f.conns, out)
	f.mu.Unlock()
}

// Close stops listening, closes every forwarded connection and waits for them to end.
func (f *Forwarder) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// writeCNIConfig writes the network configuration containerd's CRI plugin loads from dir: the
// pod network's when there is one, else loopback only (every pod then needs hostNetwork).
func writeCNIConfig(dir string, p *PodNetwork) error {
	if p == nil {
		return os.WriteFile(filepath.Join(dir, "10-loopback.conflist"), []byte(loopbackCNI), 0o644)
	}
	conf, err := p.CNIConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "10-gpudra-node.conflist"), conf, 0o644)
}
