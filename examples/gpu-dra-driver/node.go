package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/sharing/sharingtest"
	"github.com/gpudra/gpudra/topology"
)

const defaultMachine = "dgx-a100-40gb"

// nodeFlags are the flags every node-facing command shares.
type nodeFlags struct {
	nvmlMode         string
	machine          string
	migConfig        string
	nodeName         string
	dynamicMIG       bool
	consumableMemory bool
}

func (n *nodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.nvmlMode, "nvml", "fake", "NVML backend: fake (an embedded fake machine) or real (libnvidia-ml, read-only enumeration)")
	fs.StringVar(&n.machine, "machine", defaultMachine, "fake machine: "+strings.Join(gputest.Machines(), ", "))
	fs.StringVar(&n.migConfig, "mig-config", "", "fake machines: start with this mig-parted config (a name like all-balanced, or a file)")
	fs.StringVar(&n.nodeName, "node-name", "node-1", "node name; also the pool name")
	fs.BoolVar(&n.dynamicMIG, "dynamic-mig", false, "publish every MIG placement as a partitionable device (shared counters)")
	fs.BoolVar(&n.consumableMemory, "consumable-memory", false, "let several claims share a full GPU by memory (consumable capacity)")
}

// node is an opened NVML backend and what was enumerated on it.
type node struct {
	// machine is the fake machine, nil with --nvml=real.
	machine *gputest.Machine
	// host records the host actions of sharing on a fake machine (serve only); nil otherwise.
	host  *sharingtest.FakeHost
	nvml  nvml.Interface
	inv   *gpu.Inventory
	topo  *topology.Topology
	close func()
}

func (n *nodeFlags) open(ctx context.Context) (*node, error) {
	if err := oneOf("nvml", n.nvmlMode, "fake", "real"); err != nil {
		return nil, err
	}
	var sess *gpu.Session
	var machine *gputest.Machine
	var err error
	switch n.nvmlMode {
	case "real":
		if n.migConfig != "" {
			return nil, fmt.Errorf("--mig-config applies to fake machines only; with --nvml=real the GPUs' current MIG layout is read")
		}
		sess, err = gpu.OpenReal()
	default:
		var opts []gputest.Option
		if n.migConfig != "" {
			opts = append(opts, gputest.WithMIGConfig(n.migConfig))
		}
		m, merr := gputest.New(n.machine, opts...)
		if merr != nil {
			return nil, merr
		}
		machine = m
		sess, err = gpu.Open(m)
	}
	if err != nil {
		return nil, err
	}
	inv, err := sess.Enumerate(ctx)
	if err != nil {
		_ = sess.Close()
		return nil, err
	}
	var topoOpts []topology.Option
	if n.nvmlMode != "real" {
		// Fake machines have no sysfs: PCIe roots are derived from the NVML topology.
		topoOpts = append(topoOpts, topology.WithoutSysfs())
	}
	topo, err := topology.Discover(sess.Interface(), topoOpts...)
	if err != nil {
		_ = sess.Close()
		return nil, err
	}
	return &node{machine: machine, nvml: sess.Interface(), inv: inv, topo: topo, close: func() { _ = sess.Close() }}, nil
}

func (n *nodeFlags) builderOptions(nd *node) []gpudra.Option {
	// WithTopology publishes NVLink islands, fabric domains and PCIe switches and orders the
	// GPUs for the allocator's first fit; pcieRoot stays what PCIeRoot resolves (sysfs first).
	opts := []gpudra.Option{gpudra.WithPCIeRoot(nd.topo.PCIeRoot), gpudra.WithTopology(nd.topo)}
	if n.dynamicMIG {
		opts = append(opts, gpudra.WithDynamicMIG(nil))
	}
	if n.consumableMemory {
		opts = append(opts, gpudra.WithConsumableMemory(gpudra.ConsumableMemory{}))
	}
	return opts
}
