package nodeplugin_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/exclusive/exclusivetest"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

const (
	domainUID  = types.UID("6f1c2a8e-3b7d-4c5e-9f10-2a3b4c5d6e7f")
	otherUID   = types.UID("0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f6a")
	channelSel = `device.attributes["compute-domain.nvidia.com"].type == "channel"`
	daemonSel  = `device.attributes["compute-domain.nvidia.com"].type == "daemon"`
)

// fakeChannels is ChannelDevices that records what it was asked for and makes nothing.
type fakeChannels struct {
	mu      sync.Mutex
	ensured [][]int
}

var _ nodeplugin.ChannelDevices = (*fakeChannels)(nil)

func (f *fakeChannels) Ensure(_ context.Context, channels []int) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = append(f.ensured, slices.Clone(channels))
	return 511, nil
}

func (f *fakeChannels) calls() [][]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ensured)
}

// env is one node of a fake NVL domain running the compute-domain plugin: a gb200-nvl4 machine
// with the node's fabric, a fake API server (controller-runtime's client/fake) with the Node
// and the domains, and an exclusivetest node.
type env struct {
	t        *testing.T
	nodeName string
	clique   string
	client   client.Client
	machine  *gputest.Machine // the node's GPUs (SetFabric)
	fabric   gputest.Fabric   // what the node's GPUs report in its clique
	channels *fakeChannels
	node     *exclusivetest.Node
	driver   *nodeplugin.Driver
	plugin   *exclusive.Plugin
}

type envConfig struct {
	fabric  func(gputest.DomainNode) gputest.DomainNode // changes the node's fabric
	objects []client.Object

	ready time.Duration // ReadyTimeout
	hooks testhooks.Hooks
	funcs *interceptor.Funcs // intercept the fake API server's calls
}

func newEnv(t *testing.T, ec envConfig) *env {
	t.Helper()
	rack, err := gputest.NVLDomain("rack", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := rack[0]
	if ec.fabric != nil {
		n = ec.fabric(n)
	}
	machine, err := gputest.New("gb200-nvl4", n.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := nodeplugin.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	objs := append([]client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}}, ec.objects...)
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&v1beta1.ComputeDomain{})
	if ec.funcs != nil {
		b = b.WithInterceptorFuncs(*ec.funcs)
	}
	c := b.Build()
	e := &env{t: t, nodeName: n.Name, clique: rack[0].CliqueID(), client: c, machine: machine, fabric: rack[0].Fabric, channels: &fakeChannels{}}
	e.node, err = exclusivetest.NewNode(exclusivetest.WithNodeName(n.Name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.node.Close() })
	e.driver, err = nodeplugin.New(nodeplugin.Config{
		NodeName: n.Name, StateDir: e.node.StateDir,
		Fabric:  fabricOf(machine),
		Domains: nodeplugin.NewClientDomains(c), Channels: e.channels,
		ReadyTimeout: ec.ready, PollInterval: 10 * time.Millisecond, ChannelCount: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.plugin, err = e.node.NewPlugin(t.Context(), exclusive.Config{DriverName: computedomain.DriverName, Driver: e.driver, TestHooks: ec.hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.plugin.Close() })
	return e
}

// domain is a ComputeDomain in namespace default with the given clique and numNodes, and
// status.nodes entries of the given node names and statuses.
func domain(name string, uid types.UID, clique string, numNodes int, status string, nodes map[string]string) *v1beta1.ComputeDomain {
	d := &v1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid},
		Spec:   v1beta1.ComputeDomainSpec{NumNodes: numNodes},
		Status: v1beta1.ComputeDomainStatus{Status: status, CliqueID: clique}}
	for _, n := range slices.Sorted(maps.Keys(nodes)) {
		d.Status.Nodes = append(d.Status.Nodes, v1beta1.ComputeDomainNode{Name: n, IPAddress: "10.0.0.1", CliqueID: clique, Status: nodes[n]})
	}
	return d
}

// claim is a claim of the device selected by sel with one opaque config of the driver.
func claim(name, sel, params string) *resourceapi.ResourceClaim {
	c := kubelettest.Claim(name, computedomain.DriverName, sel)
	c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: computedomain.DriverName, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}}
	return c
}

func channelParams(uid types.UID, mode string) string {
	s := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"` + string(uid) + `"`
	if mode != "" {
		s += `,"allocationMode":"` + mode + `"`
	}
	return s + "}"
}

func daemonParams(uid types.UID) string {
	return `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"` + string(uid) + `"}`
}

// allocate allocates c on the env's node.
func (e *env) allocate(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	e.t.Helper()
	out, err := e.node.Allocate(e.t.Context(), e.plugin, c)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// label is the Node's computedomain.NodeLabel, "" when it has none.
func (e *env) label() string {
	e.t.Helper()
	var n corev1.Node
	if err := e.client.Get(e.t.Context(), client.ObjectKey{Name: e.nodeName}, &n); err != nil {
		e.t.Fatal(err)
	}
	return n.Labels[computedomain.NodeLabel]
}

// setNodeStatus sets the status of the env's node in the domain's status (and the domain's
// status.status).
func (e *env) setNodeStatus(name, nodeStatus, domainStatus string) {
	e.t.Helper()
	var d v1beta1.ComputeDomain
	if err := e.client.Get(e.t.Context(), client.ObjectKey{Namespace: "default", Name: name}, &d); err != nil {
		e.t.Fatal(err)
	}
	d.Status.Status = domainStatus
	d.Status.Nodes = []v1beta1.ComputeDomainNode{{Name: e.nodeName, IPAddress: "10.0.0.1", CliqueID: d.Status.CliqueID, Status: nodeStatus}}
	if err := e.client.Status().Update(e.t.Context(), &d); err != nil {
		e.t.Error(err)
	}
}

// leftovers lists what a claim may leave on the node: CDI specs, checkpoint entries and the
// plugin's records and daemon directories.
func (e *env) leftovers() []string {
	e.t.Helper()
	var out []string
	specs, err := e.node.Specs(computedomain.DriverName)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range specs {
		out = append(out, "spec "+s)
	}
	rep, err := e.plugin.Reconcile(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	if rep.Prepared > 0 || len(rep.RolledBack) > 0 || len(rep.UnprepareFinished) > 0 {
		out = append(out, "checkpoint "+rep.String())
	}
	for _, dir := range []string{"computedomain-claims", "domains"} {
		out = append(out, listDir(e.t, e.node.StateDir+"/"+dir)...)
	}
	return out
}

// fabricOf is the Fabric of a gputest machine, read through NVML as a driver wires it.
func fabricOf(m *gputest.Machine) nodeplugin.FabricFunc {
	return func(context.Context) ([]topology.GPU, error) { return nvmltopology.GPUs(m) }
}
