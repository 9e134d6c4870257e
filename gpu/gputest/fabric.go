package gputest

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
)

// Fabric is what GetGpuFabricInfo reports for a GPU of a machine on an NVLink fabric (a GB200
// tray in an NVL72 rack): the fabric cluster, the clique within it, and how far the fabric
// manager got with registering the GPU. A GPU belongs to the clique only when State is
// GPU_FABRIC_STATE_COMPLETED, Status is SUCCESS and ClusterUUID is not the zero UUID.
type Fabric struct {
	// ClusterUUID is the NVLink fabric cluster, a UUID ("c0a8e1f4-…"); empty means the zero
	// UUID, as a GPU the fabric manager has not placed reports.
	ClusterUUID string
	// CliqueID is the clique within the cluster.
	CliqueID uint32
	// State is the GPU's fabric registration state (GPU_FABRIC_STATE_COMPLETED when done).
	State nvml.GpuFabricState
	// Status is the result of the registration once State is COMPLETED (SUCCESS when it
	// worked).
	Status nvml.Return
}

// ReadyFabric is the fabric info of a GPU registered in clique cliqueID of cluster clusterUUID.
func ReadyFabric(clusterUUID string, cliqueID uint32) Fabric {
	return Fabric{ClusterUUID: clusterUUID, CliqueID: cliqueID, State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: nvml.SUCCESS}
}

// InProgress returns f as it reads while the fabric manager is still registering the GPU:
// same cluster and clique, State GPU_FABRIC_STATE_IN_PROGRESS, Status ERROR_NOT_READY. Such a
// GPU is in no clique yet.
func (f Fabric) InProgress() Fabric {
	f.State, f.Status = nvml.GPU_FABRIC_STATE_IN_PROGRESS, nvml.ERROR_NOT_READY
	return f
}

// Failed returns f as it reads when the fabric manager gave up on the GPU: State COMPLETED
// with Status ret (ERROR_UNKNOWN, say). Such a GPU is in no clique.
func (f Fabric) Failed(ret nvml.Return) Fabric {
	f.State, f.Status = nvml.GPU_FABRIC_STATE_COMPLETED, ret
	return f
}

// info converts f into NVML's struct, checking the cluster UUID.
func (f Fabric) info() (nvml.GpuFabricInfo, error) {
	var cluster uuid.UUID
	if f.ClusterUUID != "" {
		var err error
		if cluster, err = uuid.Parse(f.ClusterUUID); err != nil {
			return nvml.GpuFabricInfo{}, fmt.Errorf("ClusterUUID %q is not a UUID: %w", f.ClusterUUID, err)
		}
	}
	return nvml.GpuFabricInfo{ClusterUuid: cluster, CliqueId: f.CliqueID, State: uint8(f.State), Status: uint32(f.Status)}, nil
}

// defaultFabric is what every GPU of a fabric machine reports unless WithFabric or
// WithGPUFabric says otherwise: registered in clique 1 of a cluster named after the machine.
func defaultFabric(machine string) nvml.GpuFabricInfo {
	return nvml.GpuFabricInfo{
		ClusterUuid: uuid.NewSHA1(uuidNamespace, []byte(machine+"/fabric")),
		Status:      uint32(nvml.SUCCESS),
		CliqueId:    1,
		State:       nvml.GPU_FABRIC_STATE_COMPLETED,
	}
}

// WithFabric makes every GPU of the machine report f from GetGpuFabricInfo instead of the
// machine's default fabric (clique 1 of a cluster named after the machine). It is an error on a
// machine whose GPUs are on no NVLink fabric (only gb200-nvl4 is) and for a ClusterUUID that is
// not a UUID.
func WithFabric(f Fabric) Option {
	return func(c *config) error {
		if _, err := f.info(); err != nil {
			return fmt.Errorf("gputest: WithFabric: %w", err)
		}
		c.fabricAll = &f
		return nil
	}
}

// WithGPUFabric makes GPU i report f from GetGpuFabricInfo, after WithFabric: a tray with one GPU
// still registering, failed, or in another clique. It is an error on a machine whose GPUs are on
// no NVLink fabric, for an index out of range (checked by New) and for a ClusterUUID that is not
// a UUID.
func WithGPUFabric(i int, f Fabric) Option {
	return func(c *config) error {
		if _, err := f.info(); err != nil {
			return fmt.Errorf("gputest: WithGPUFabric(%d): %w", i, err)
		}
		if c.fabric == nil {
			c.fabric = map[int]Fabric{}
		}
		c.fabric[i] = f
		return nil
	}
}

// applyFabric sets the fabric info of each GPU from the options.
func (m *Machine) applyFabric(c *config) error {
	if c.fabricAll == nil && len(c.fabric) == 0 {
		return nil
	}
	if !m.spec.fabric {
		return fmt.Errorf("gputest: WithFabric/WithGPUFabric: the GPUs of %s are on no NVLink fabric (gb200-nvl4's are)", m.spec.name)
	}
	for i, d := range m.devices {
		f, ok := c.fabric[i]
		if !ok && c.fabricAll == nil {
			continue
		}
		if !ok {
			f = *c.fabricAll
		}
		info, _ := f.info() // checked by the option
		d.fabric = &info
	}
	for i := range c.fabric {
		if i < 0 || i >= len(m.devices) {
			return fmt.Errorf("gputest: WithGPUFabric(%d): %s has GPUs 0..%d", i, m.spec.name, len(m.devices)-1)
		}
	}
	return nil
}

// SetFabric changes what GPU i reports from GetGpuFabricInfo from now on: a tray whose fabric
// registration completes (or fails) while a driver runs. It is an error on a machine whose GPUs
// are on no NVLink fabric, for an index out of range and for a ClusterUUID that is not a UUID.
func (m *Machine) SetFabric(i int, f Fabric) error {
	info, err := f.info()
	if err != nil {
		return fmt.Errorf("gputest: SetFabric(%d): %w", i, err)
	}
	if !m.spec.fabric {
		return fmt.Errorf("gputest: SetFabric(%d): the GPUs of %s are on no NVLink fabric (gb200-nvl4's are)", i, m.spec.name)
	}
	if i < 0 || i >= len(m.devices) {
		return fmt.Errorf("gputest: SetFabric(%d): %s has GPUs 0..%d", i, m.spec.name, len(m.devices)-1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.devices[i].fabric = &info
	return nil
}

// NVL72Nodes and NVL72Cliques are NVLDomain's defaults: an NVL72 rack has 18 compute trays of 4
// GB200 GPUs; the domain splits them into two cliques.
const (
	NVL72Nodes   = 18
	NVL72Cliques = 2
)

// DomainNode is one node (a gb200-nvl4 compute tray) of a fake NVLink domain.
type DomainNode struct {
	// Name is the node's name, "<domain>-<NN>" from 00.
	Name string
	// Fabric is what each of its GPUs reports.
	Fabric Fabric
}

// CliqueID returns "<cluster UUID>.<clique ID>", the node's NVLink clique as drivers name it
// (topology.Fabric.DomainID).
func (n DomainNode) CliqueID() string {
	return fmt.Sprintf("%s.%d", n.Fabric.ClusterUUID, n.Fabric.CliqueID)
}

// Options returns the options that make a gb200-nvl4 machine this node:
// New("gb200-nvl4", n.Options()...).
func (n DomainNode) Options() []Option { return []Option{WithFabric(n.Fabric)} }

// NVLDomain lays out a multi-node NVLink domain like an NVL72 rack: nodes gb200-nvl4 trays in
// one fabric cluster (a UUID derived from name, the same for the same name), split into cliques
// of consecutive nodes numbered from 1, as even as can be (18 nodes in 2 cliques: nodes 00-08 in
// clique 1, 09-17 in clique 2). nodes 0 means NVL72Nodes and cliques 0 NVL72Cliques. It is an
// error for an empty name, a negative count or more cliques than nodes. Make a node's fabric
// not ready with Fabric.InProgress or Fabric.Failed before taking its options.
func NVLDomain(name string, nodes, cliques int) ([]DomainNode, error) {
	if nodes == 0 {
		nodes = NVL72Nodes
	}
	if cliques == 0 {
		cliques = NVL72Cliques
	}
	switch {
	case name == "":
		return nil, fmt.Errorf("gputest: NVLDomain: empty domain name")
	case nodes < 0 || cliques < 0:
		return nil, fmt.Errorf("gputest: NVLDomain(%q, %d, %d): negative count (0 means the default, %d nodes in %d cliques)", name, nodes, cliques, NVL72Nodes, NVL72Cliques)
	case cliques > nodes:
		return nil, fmt.Errorf("gputest: NVLDomain(%q, %d, %d): more cliques than nodes", name, nodes, cliques)
	}
	cluster := uuid.NewSHA1(uuidNamespace, []byte("nvl-domain/"+name)).String()
	out := make([]DomainNode, nodes)
	for i := range out {
		out[i] = DomainNode{Name: fmt.Sprintf("%s-%02d", name, i), Fabric: ReadyFabric(cluster, uint32(i*cliques/nodes+1))}
	}
	return out, nil
}
