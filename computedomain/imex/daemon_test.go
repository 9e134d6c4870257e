package imex_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

// recordingDomains records the statuses a daemon applied, in order.
type recordingDomains struct {
	imex.Domains
	mu      sync.Mutex
	applied []string
}

var _ imex.Domains = (*recordingDomains)(nil)

// ApplyNode implements imex.Domains.
func (r *recordingDomains) ApplyNode(ctx context.Context, key types.NamespacedName, uid types.UID, fm string, n v1beta1.ComputeDomainNode) error {
	err := r.Domains.ApplyNode(ctx, key, uid, fm, n)
	if err == nil {
		r.mu.Lock()
		r.applied = append(r.applied, n.Status)
		r.mu.Unlock()
	}
	return err
}

func (r *recordingDomains) statuses() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied)
}

// daemonRun is a Daemon running in the background for a test.
type daemonRun struct {
	cfg     imex.Config
	c       client.Client
	domains *recordingDomains
	d       *imex.Daemon
	stop    func() error
}

// startDaemon runs node-a's daemon (address selfIP) of the domain newDomain(others...), its
// fake nvidia-imex with faults.
func startDaemon(t *testing.T, root string, faults imextest.Faults, others ...v1beta1.ComputeDomainNode) *daemonRun {
	t.Helper()
	b, err := imextest.NewClientBuilder()
	if err != nil {
		t.Fatal(err)
	}
	return startDaemonWith(t, root, faults, b.WithObjects(newDomain(others...)).Build())
}

// startDaemonOn runs node-a's daemon against c, which holds its domain.
func startDaemonOn(t *testing.T, root string, c client.Client) *daemonRun {
	t.Helper()
	return startDaemonWith(t, root, imextest.Faults{}, c)
}

func startDaemonWith(t *testing.T, root string, faults imextest.Faults, c client.Client) *daemonRun {
	t.Helper()
	r := &daemonRun{c: c}
	r.domains = &recordingDomains{Domains: imex.ClientDomains{Client: r.c}}
	r.cfg = imex.Config{
		NodeName: "node-a", PodIP: selfIP, DomainUID: domainUID, DomainName: "train", DomainNamespace: "team",
		CliqueID: clique, Dir: t.TempDir(), DriverRoot: root,
	}
	if err := imextest.WriteFaults(r.cfg.Dir, faults); err != nil {
		t.Fatal(err)
	}
	var err error
	r.d, err = imex.NewDaemon(r.cfg, r.domains, imex.WithDomainPoll(50*time.Millisecond), imex.WithSupervisorOptions(fastSupervisor(root)...))
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.d.Run(ctx) }()
	var once sync.Once
	var runErr error
	r.stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// nodes returns the domain's status.nodes.
func (r *daemonRun) nodes(t *testing.T) []v1beta1.ComputeDomainNode {
	t.Helper()
	var cd v1beta1.ComputeDomain
	if err := r.c.Get(context.Background(), domainKey(), &cd); err != nil {
		t.Fatal(err)
	}
	return cd.Status.Nodes
}

// entry returns node-a's entry as the daemon applies it with status.
func entry(status string) v1beta1.ComputeDomainNode {
	return v1beta1.ComputeDomainNode{Name: "node-a", IPAddress: selfIP.String(), CliqueID: clique, Status: status}
}

// TestDaemon runs node-a's daemon against a fake API server, with the fake nvidia-imex.
func TestDaemon(t *testing.T) {
	root := imextest.NewDriverRoot(t)
	for _, tc := range []struct {
		name string
		test func(*testing.T, string)
	}{
		{"killed nvidia-imex is restarted and reported NotReady then Ready", testDaemonKilled},
		{"changed peers rewrite the nodes file and restart nvidia-imex", testDaemonPeersChange},
		{"stop removes the node's entry", testDaemonStop},
		{"stop waits for nvidia-imex to exit", testDaemonStopWaits},
		{"a lost entry is applied again", testDaemonEntryLost},
		{"an incomplete node list keeps the node NotReady", testDaemonWaitsForAllNodes},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, root) })
	}
}

func testDaemonKilled(t *testing.T, root string) {
	r := startDaemon(t, root, imextest.Faults{})
	ready := []string{v1beta1.StatusNotReady, v1beta1.StatusReady}
	waitFor(t, 10*time.Second, "NotReady then Ready", func() bool { return slices.Equal(r.domains.statuses(), ready) })
	if diff := cmp.Diff([]v1beta1.ComputeDomainNode{entry(v1beta1.StatusReady)}, r.nodes(t)); diff != "" {
		t.Errorf("status.nodes once ready (-want +got):\n%s", diff)
	}
	pid := fakeState(t, r.cfg.Dir).PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	again := append(slices.Clone(ready), ready...)
	waitFor(t, 10*time.Second, "NotReady then Ready again", func() bool { return slices.Equal(r.domains.statuses(), again) })
	if st := fakeState(t, r.cfg.Dir); st.Starts != 2 || st.PID == pid {
		t.Errorf("fake state %+v, want a second start with a new PID", st)
	}
	if diff := cmp.Diff([]v1beta1.ComputeDomainNode{entry(v1beta1.StatusReady)}, r.nodes(t)); diff != "" {
		t.Errorf("status.nodes after the restart (-want +got):\n%s", diff)
	}
}

func testDaemonPeersChange(t *testing.T, root string) {
	r := startDaemon(t, root, imextest.Faults{},
		v1beta1.ComputeDomainNode{Name: "node-b", IPAddress: "10.0.0.2", CliqueID: clique, Index: 1, Status: v1beta1.StatusReady},
		v1beta1.ComputeDomainNode{Name: "node-x", IPAddress: "10.0.9.9", CliqueID: "other-cluster.1", Status: v1beta1.StatusReady},
	)
	waitFor(t, 10*time.Second, "the node to be Ready", func() bool { return slices.Contains(r.domains.statuses(), v1beta1.StatusReady) })
	if st := fakeState(t, r.cfg.Dir); st.Starts != 1 || !slices.Equal(st.Nodes, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("fake state %+v, want one start with nodes 10.0.0.1, 10.0.0.2 (node-x is of another clique)", st)
	}
	// node-0 joins: it sorts first.
	var cd v1beta1.ComputeDomain
	if err := r.c.Get(context.Background(), domainKey(), &cd); err != nil {
		t.Fatal(err)
	}
	cd.Status.Nodes = append(cd.Status.Nodes, v1beta1.ComputeDomainNode{Name: "node-0", IPAddress: "10.0.0.3", CliqueID: clique, Status: v1beta1.StatusNotReady})
	if err := r.c.Status().Update(context.Background(), &cd); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.3", "10.0.0.1", "10.0.0.2"}
	waitFor(t, 10*time.Second, "nvidia-imex restarted with node-0", func() bool {
		st := fakeState(t, r.cfg.Dir)
		return st.Starts == 2 && slices.Equal(st.Nodes, want)
	})
	if got := readFile(t, r.cfg.Dir, imex.NodesFile); got != strings.Join(want, "\n")+"\n" {
		t.Errorf("nodes file = %q, want %v one a line", got, want)
	}
	waitFor(t, 10*time.Second, "Ready after the restart", func() bool {
		s := r.domains.statuses()
		return len(s) >= 4 && s[len(s)-1] == v1beta1.StatusReady
	})
}

func testDaemonStop(t *testing.T, root string) {
	other := v1beta1.ComputeDomainNode{Name: "node-b", IPAddress: "10.0.0.2", CliqueID: clique, Index: 1, Status: v1beta1.StatusReady}
	r := startDaemon(t, root, imextest.Faults{}, other)
	waitFor(t, 10*time.Second, "the node to be Ready", func() bool { return slices.Contains(r.domains.statuses(), v1beta1.StatusReady) })
	pid := fakeState(t, r.cfg.Dir).PID
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff := cmp.Diff([]v1beta1.ComputeDomainNode{other}, r.nodes(t)); diff != "" {
		t.Errorf("status.nodes after the stop (-want +got):\n%s", diff)
	}
	if imextest.Alive(pid) {
		t.Errorf("nvidia-imex (pid %d) still runs after the daemon stopped", pid)
	}
	if log := readFile(t, r.cfg.Dir, imex.LogFile); !strings.Contains(log, "stopping on terminated") {
		t.Errorf("nvidia-imex was not stopped with SIGTERM; its log:\n%s", log)
	}
}

// testDaemonStopWaits: Run returns only after nvidia-imex is gone, even one that takes the
// whole grace period (it ignores SIGTERM) to die.
func testDaemonStopWaits(t *testing.T, root string) {
	r := startDaemon(t, root, imextest.Faults{IgnoreSIGTERM: true})
	waitFor(t, 10*time.Second, "the node to be Ready", func() bool { return slices.Contains(r.domains.statuses(), v1beta1.StatusReady) })
	pid := fakeState(t, r.cfg.Dir).PID
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if imextest.Alive(pid) {
		t.Errorf("nvidia-imex (pid %d) still runs after the daemon stopped", pid)
	}
	if nodes := r.nodes(t); len(nodes) != 0 {
		t.Errorf("status.nodes after the stop: %v, want none", nodes)
	}
}

// testDaemonEntryLost: an entry that someone else's status update dropped is applied again.
func testDaemonEntryLost(t *testing.T, root string) {
	r := startDaemon(t, root, imextest.Faults{})
	waitFor(t, 10*time.Second, "the node to be Ready", func() bool { return slices.Contains(r.domains.statuses(), v1beta1.StatusReady) })
	var cd v1beta1.ComputeDomain
	if err := r.c.Get(context.Background(), domainKey(), &cd); err != nil {
		t.Fatal(err)
	}
	cd.Status.Nodes = nil
	if err := r.c.Status().Update(context.Background(), &cd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the entry to be back", func() bool {
		return cmp.Equal(r.nodes(t), []v1beta1.ComputeDomainNode{entry(v1beta1.StatusReady)})
	})
}

// testDaemonWaitsForAllNodes: in a domain of numNodes 2, node-a's nvidia-imex is ready with
// itself alone, but the node stays NotReady until node-b joins the list (and nvidia-imex is
// restarted and ready with both).
func testDaemonWaitsForAllNodes(t *testing.T, root string) {
	b, err := imextest.NewClientBuilder()
	if err != nil {
		t.Fatal(err)
	}
	cd := newDomain()
	cd.Spec.NumNodes = 2
	r := startDaemonOn(t, root, b.WithObjects(cd).Build())
	waitFor(t, 10*time.Second, "nvidia-imex ready with node-a alone", func() bool { return r.d.Supervisor().State().Ready })
	time.Sleep(300 * time.Millisecond) // several domain polls
	if got := r.domains.statuses(); !slices.Equal(got, []string{v1beta1.StatusNotReady}) {
		t.Fatalf("statuses with an incomplete node list: %v, want only NotReady", got)
	}
	if err := r.c.Get(context.Background(), domainKey(), cd); err != nil {
		t.Fatal(err)
	}
	cd.Status.Nodes = append(cd.Status.Nodes, v1beta1.ComputeDomainNode{Name: "node-b", IPAddress: "10.0.0.2", CliqueID: clique, Status: v1beta1.StatusNotReady})
	if err := r.c.Status().Update(context.Background(), cd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "Ready once node-b is listed", func() bool {
		s := r.domains.statuses()
		return s[len(s)-1] == v1beta1.StatusReady
	})
	if st := fakeState(t, r.cfg.Dir); !slices.Equal(st.Nodes, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("nvidia-imex runs with nodes %v, want 10.0.0.1 and 10.0.0.2", st.Nodes)
	}
}
