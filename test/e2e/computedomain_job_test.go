package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/controller"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// cdWait bounds every wait of the ComputeDomain tests.
const cdWait = 2 * time.Minute

// cdJob is one ComputeDomain and the pods of its job.
type cdJob struct {
	ns, name string
	uid      types.UID
	clique   string
	pods     []*corev1.Pod
	// claims are the pods' channel claims, by pod name.
	claims map[string]fakekubelet.Claim
	// deleted is set once deleteJob ran.
	deleted bool
}

// TestComputeDomainJob (issue 31): a ComputeDomain of 4 nodes on a fake NVL domain of two
// cliques: the real scheduler puts the job's pods on nodes of the clique the controller chose,
// the DaemonSet controller starts an IMEX daemon on each of them, every node's plugin prepares
// the channel (once its daemon is Ready) with the channel device node and
// NVIDIA_VISIBLE_DEVICES=void, and the domain turns Ready with 4 Ready nodes. A second domain
// gets the other clique and leaves the first alone.
func TestComputeDomainJob(t *testing.T) {
	r := computeDomainRack(t)
	ctx := context.Background()
	first := r.runJob(t, "cd-job", "train", 4)
	before := r.domain(t, first)

	second := r.runJob(t, "cd-job", "infer", 2)
	if second.clique == first.clique {
		t.Errorf("the second domain got clique %s, the first's", second.clique)
	}
	after := r.domain(t, first)
	if diff := cmp.Diff(before.Status, after.Status); diff != "" {
		t.Errorf("the first domain's status changed when the second ran (-before +after):\n%s", diff)
	}
	for _, p := range first.pods {
		if r.daemonOf(second.uid, p.Spec.NodeName) != nil {
			t.Errorf("node %s of the first domain runs a daemon of the second", p.Spec.NodeName)
		}
	}
	tmpl, err := suite.Client.ResourceV1().ResourceClaimTemplates(first.ns).Get(ctx, first.name+"-channel", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := tmpl.Labels[computedomain.NodeLabel]; got != string(first.uid) {
		t.Errorf("the first domain's channel template is labelled for %q, want %s", got, first.uid)
	}
}

// TestComputeDomainDaemonKilled (issue 31): SIGKILL of one node's nvidia-imex turns that node
// NotReady in the domain's status, and the domain with it; the daemon's supervisor restarts
// nvidia-imex and both turn Ready again.
func TestComputeDomainDaemonKilled(t *testing.T) {
	r := computeDomainRack(t)
	ctx := context.Background()
	job := r.runJob(t, "cd-kill", "train", 2)
	node := job.pods[0].Spec.NodeName
	d := r.daemonOf(job.uid, node)
	if d == nil {
		t.Fatalf("no daemon of the domain on %s", node)
	}
	st, err := imextest.ReadState(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.client.Watch(ctx, &cdv1beta1.ComputeDomainList{}, client.InNamespace(job.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	t.Logf("killing nvidia-imex (pid %d) on %s", st.PID, node)
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var sawNode, sawDomain bool
	deadline := time.After(cdWait)
	for !sawNode || !sawDomain {
		select {
		case ev := <-w.ResultChan():
			cd, ok := ev.Object.(*cdv1beta1.ComputeDomain)
			if !ok || cd.Name != job.name {
				continue
			}
			sawDomain = sawDomain || cd.Status.Status == cdv1beta1.StatusNotReady
			sawNode = sawNode || nodeStatus(cd, node) == cdv1beta1.StatusNotReady
		case <-deadline:
			t.Fatalf("after the kill: node %s NotReady seen %v, domain NotReady seen %v", node, sawNode, sawDomain)
		}
	}
	r.waitDomain(t, job, "Ready again after the restart", func(cd *cdv1beta1.ComputeDomain) bool {
		return cd.Status.Status == cdv1beta1.StatusReady && nodeStatus(cd, node) == cdv1beta1.StatusReady
	})
	st2, err := imextest.ReadState(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	if st2.PID == st.PID || st2.Starts <= st.Starts {
		t.Errorf("nvidia-imex on %s: pid %d starts %d after the kill; before pid %d starts %d: not restarted", node, st2.PID, st2.Starts, st.PID, st.Starts)
	}
}

// TestComputeDomainNodeLeaves (issue 31): a node whose daemon stops (and withdraws its entry)
// and whose Node is deleted is no longer listed, and the domain that needs 4 nodes is NotReady.
func TestComputeDomainNodeLeaves(t *testing.T) {
	r := computeDomainRack(t)
	ctx := context.Background()
	job := r.runJob(t, "cd-leave", "train", 4)
	node := job.pods[len(job.pods)-1].Spec.NodeName
	d := r.daemonOf(job.uid, node)
	if d == nil {
		t.Fatalf("no daemon of the domain on %s", node)
	}
	t.Logf("stopping the daemon on %s and deleting the Node", node)
	if err := d.proc.Stop(20 * time.Second); err != nil {
		t.Errorf("the daemon on %s did not stop cleanly: %v", node, err)
	}
	if err := r.removeNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	cd := r.waitDomain(t, job, node+" gone, NotReady", func(cd *cdv1beta1.ComputeDomain) bool {
		return nodeStatus(cd, node) == "" && cd.Status.Status == cdv1beta1.StatusNotReady
	})
	if got := len(cd.Status.Nodes); got != 3 {
		t.Errorf("the domain lists %d nodes, want the 3 left: %+v", got, cd.Status.Nodes)
	}
}

// TestComputeDomainDeletion (issue 31): deleting a job's pods and its domain removes the node
// labels, the DaemonSet, both claim templates and the finalizer; the domain goes; the plugins'
// unprepares leave no CDI spec of the domain's claims.
func TestComputeDomainDeletion(t *testing.T) {
	r := computeDomainRack(t)
	ctx := context.Background()
	job := r.runJob(t, "cd-del", "train", 2)
	r.deleteJob(t, job)
	nodes, err := suite.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: computedomain.NodeLabel + "=" + string(job.uid)})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		t.Errorf("node %s still labelled for the deleted domain", n.Name)
	}
	daemon := controller.DaemonName(string(job.uid))
	if _, err := suite.Client.AppsV1().DaemonSets(cdDriverNS).Get(ctx, daemon, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet %s: %v, want NotFound", daemon, err)
	}
	if _, err := suite.Client.ResourceV1().ResourceClaimTemplates(cdDriverNS).Get(ctx, daemon, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("daemon claim template %s: %v, want NotFound", daemon, err)
	}
	if _, err := suite.Client.ResourceV1().ResourceClaimTemplates(job.ns).Get(ctx, job.name+"-channel", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("channel claim template %s/%s-channel: %v, want NotFound", job.ns, job.name, err)
	}
	r.mu.Lock()
	claims := append([]fakekubelet.Claim{}, r.daemonClaims[job.uid]...)
	r.mu.Unlock()
	if len(claims) != 2 {
		t.Errorf("%d daemon claims were prepared for the domain, want 2", len(claims))
	}
	for _, c := range job.claims {
		claims = append(claims, c)
	}
	for _, name := range r.names {
		n := r.node(name)
		if n == nil {
			continue
		}
		for _, c := range claims {
			path, err := claimSpecPath(n, c.UID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("node %s: the CDI spec of claim %s/%s is still there (%v)", name, c.Namespace, c.Name, err)
			}
		}
	}
}

// runJob creates ComputeDomain ns/name of numNodes nodes and numNodes pods naming its channel
// template, acts as kubelet for them and waits until the domain is Ready. It checks the
// placement, the channels' CDI edits and the status on the way. The test's cleanup deletes
// the job unless the test did.
func (r *cdRack) runJob(t *testing.T, ns, name string, numNodes int) *cdJob {
	t.Helper()
	ctx := context.Background()
	if _, err := suite.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if err := framework.CreateNamespace(ctx, suite.Client, ns, nil); err != nil {
			t.Fatal(err)
		}
	}
	job := &cdJob{ns: ns, name: name, claims: map[string]fakekubelet.Claim{}}
	cd := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cdv1beta1.ComputeDomainSpec{NumNodes: numNodes, Channel: &cdv1beta1.ComputeDomainChannelSpec{
			ResourceClaimTemplate: cdv1beta1.ResourceClaimTemplateReference{Name: name + "-channel"}}}}
	if err := r.client.Create(ctx, cd); err != nil {
		t.Fatalf("create ComputeDomain %s/%s: %v", ns, name, err)
	}
	job.uid = cd.UID
	t.Cleanup(func() {
		if !job.deleted {
			r.deleteJob(t, job)
		}
	})
	got := r.waitDomain(t, job, "a clique chosen", func(cd *cdv1beta1.ComputeDomain) bool { return cd.Status.CliqueID != "" })
	job.clique = got.Status.CliqueID
	t.Logf("ComputeDomain %s/%s (%s): clique %s", ns, name, job.uid, job.clique)
	r.waitTemplate(t, ns, name+"-channel")
	job.pods = r.schedulePods(t, job, numNodes)
	r.prepareChannels(t, job)
	cd = r.waitDomain(t, job, fmt.Sprintf("Ready with %d Ready nodes", numNodes), func(cd *cdv1beta1.ComputeDomain) bool {
		return cd.Status.Status == cdv1beta1.StatusReady && readyNodes(cd, job.clique) == numNodes
	})
	t.Logf("ComputeDomain %s/%s Ready: %d nodes", ns, name, len(cd.Status.Nodes))
	return job
}

// schedulePods creates n pods of job (one per node) and waits until the scheduler bound them
// all; each must be on a node of the domain's clique.
func (r *cdRack) schedulePods(t *testing.T, job *cdJob, n int) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		if _, err := suite.Client.CoreV1().Pods(job.ns).Create(ctx, jobPod(job, i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var pods []*corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, cdWait, true, func(ctx context.Context) (bool, error) {
		list, err := suite.Client.CoreV1().Pods(job.ns).List(ctx, metav1.ListOptions{LabelSelector: "job=" + job.name})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for i := range list.Items {
			if list.Items[i].Spec.NodeName != "" && len(list.Items[i].Status.ResourceClaimStatuses) > 0 {
				pods = append(pods, &list.Items[i])
			}
		}
		return len(pods) == n, nil
	})
	if err != nil {
		t.Fatalf("%d of the %d pods of %s scheduled: %v", len(pods), n, job.name, err)
	}
	for _, p := range pods {
		node := r.node(p.Spec.NodeName)
		switch {
		case node == nil:
			t.Errorf("pod %s is on %s, not a node of the rack", p.Name, p.Spec.NodeName)
		case node.clique != job.clique:
			t.Errorf("pod %s is on %s in clique %s; the domain's clique is %s", p.Name, node.name, node.clique, job.clique)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return pods
}

// jobPod is pod i of job: its channel claim from the domain's template, one per node.
func jobPod(job *cdJob, i int) *corev1.Pod {
	labels := map[string]string{"job": job.name}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", job.name, i), Namespace: job.ns, Labels: labels},
		Spec: corev1.PodSpec{
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "channel", ResourceClaimTemplateName: ptr.To(job.name + "-channel")}},
			Containers: []corev1.Container{{Name: "worker", Image: "example.invalid/worker:test",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "channel"}}}}},
		},
	}
}

// prepareChannels prepares the pods' channel claims through their nodes' plugins, all at once
// (each waits until its node's daemon is Ready; a prepare that fails is retried, as kubelet
// does), and checks each claim's CDI edits and device node.
func (r *cdRack) prepareChannels(t *testing.T, job *cdJob) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cdWait)
	defer cancel()
	errs := make([]error, len(job.pods))
	var wg sync.WaitGroup
	for i, p := range job.pods {
		claim, err := podClaim(ctx, p, "channel")
		if err != nil {
			t.Fatal(err)
		}
		job.claims[p.Name] = claim
		n := r.node(p.Spec.NodeName)
		wg.Go(func() {
			var last error
			errs[i] = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
				resp, err := n.plugin.Prepare(ctx, claim)
				last = fakekubelet.PrepareErrors(resp, err, claim)
				return last == nil, nil
			})
			if errs[i] != nil {
				errs[i] = fmt.Errorf("prepare %s on %s: %w (last: %v)", claim.Name, n.name, errs[i], last)
				return
			}
			// The plugin prepares a channel only once the node's daemon is Ready.
			cd := &cdv1beta1.ComputeDomain{}
			if err := r.client.Get(ctx, types.NamespacedName{Namespace: job.ns, Name: job.name}, cd); err != nil {
				errs[i] = err
			} else if st := nodeStatus(cd, n.name); st != cdv1beta1.StatusReady {
				errs[i] = fmt.Errorf("claim %s prepared on %s while its daemon is %q in the domain's status, want Ready", claim.Name, n.name, st)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range job.pods {
		checkChannel(t, r.node(p.Spec.NodeName), job.claims[p.Name])
	}
}

// checkChannel checks the CDI spec of a prepared channel claim on n and its device node.
func checkChannel(t *testing.T, n *cdNode, claim fakekubelet.Claim) {
	t.Helper()
	spec, err := cdClaimSpec(n, claim.UID)
	if err != nil {
		t.Fatal(err)
	}
	path := computedomain.ChannelDevicePath(0)
	want := []cdispecs.ContainerEdits{{
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
		DeviceNodes: []*cdispecs.DeviceNode{{Path: path, Type: "c", Major: cdChannelMajor, Minor: 0}},
	}}
	var got []cdispecs.ContainerEdits
	for _, d := range spec.Devices {
		got = append(got, d.ContainerEdits)
	}
	// Path, type and number say which device a container gets; the rest is the plugin's choice.
	opt := cmpopts.IgnoreFields(cdispecs.DeviceNode{}, "HostPath", "Permissions", "FileMode", "UID", "GID")
	if diff := cmp.Diff(want, got, opt); diff != "" {
		t.Errorf("node %s, claim %s: CDI edits (-want +got):\n%s", n.name, claim.Name, diff)
	}
	var st unix.Stat_t
	host := filepath.Join(n.devRoot, path[len("/dev"):])
	if err := unix.Stat(host, &st); err != nil {
		t.Errorf("node %s: channel device node: %v", n.name, err)
	} else if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != cdChannelMajor || unix.Minor(st.Rdev) != 0 {
		t.Errorf("node %s: %s is mode %o, device %d:%d; want a character device %d:0", n.name, host, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), cdChannelMajor)
	}
}

// deleteJob deletes the job's pods (grace 0, as after kubelet killed them), unprepares the
// claims it prepared through the plugins, deletes the domain and waits until it, its daemon pods and its
// daemons are gone.
func (r *cdRack) deleteJob(t *testing.T, job *cdJob) {
	t.Helper()
	ctx := context.Background()
	job.deleted = true
	list, err := suite.Client.CoreV1().Pods(job.ns).List(ctx, metav1.ListOptions{LabelSelector: "job=" + job.name})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if err := forceDelete(ctx, p); err != nil {
			t.Error(err)
		}
		if n := r.node(p.Spec.NodeName); n != nil {
			c := job.claims[p.Name]
			if c.UID == "" {
				continue
			}
			resp, err := n.plugin.Unprepare(ctx, c)
			if err := fakekubelet.UnprepareErrors(resp, err, c); err != nil {
				t.Errorf("unprepare %s on %s: %v", c.Name, n.name, err)
			}
		}
	}
	cd := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: job.ns, Name: job.name}}
	if err := r.client.Delete(ctx, cd); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, cdWait, true, func(ctx context.Context) (bool, error) {
		err := r.client.Get(ctx, client.ObjectKeyFromObject(cd), cd)
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		pods, err := suite.Client.CoreV1().Pods(cdDriverNS).List(ctx, metav1.ListOptions{LabelSelector: computedomain.NodeLabel + "=" + string(job.uid)})
		if err != nil || len(pods.Items) > 0 {
			return false, nil
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, d := range r.daemons {
			if daemonDomain(d) == job.uid {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("ComputeDomain %s/%s, its daemon pods and daemons not all gone: %v (domain: %+v)", job.ns, job.name, err, cd)
	}
	t.Logf("ComputeDomain %s/%s deleted", job.ns, job.name)
}

// domain reads job's domain.
func (r *cdRack) domain(t *testing.T, job *cdJob) *cdv1beta1.ComputeDomain {
	t.Helper()
	cd := &cdv1beta1.ComputeDomain{}
	if err := r.client.Get(context.Background(), types.NamespacedName{Namespace: job.ns, Name: job.name}, cd); err != nil {
		t.Fatal(err)
	}
	return cd
}

// waitDomain waits until job's domain satisfies ok and returns it.
func (r *cdRack) waitDomain(t *testing.T, job *cdJob, what string, ok func(*cdv1beta1.ComputeDomain) bool) *cdv1beta1.ComputeDomain {
	t.Helper()
	cd := &cdv1beta1.ComputeDomain{}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, cdWait, true, func(ctx context.Context) (bool, error) {
		if err := r.client.Get(ctx, types.NamespacedName{Namespace: job.ns, Name: job.name}, cd); err != nil {
			return false, nil
		}
		return ok(cd), nil
	})
	if err != nil {
		t.Fatalf("ComputeDomain %s/%s never %s: %v; status %+v", job.ns, job.name, what, err, cd.Status)
	}
	return cd
}

// waitTemplate waits for ResourceClaimTemplate ns/name.
func (r *cdRack) waitTemplate(t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, cdWait, true, func(ctx context.Context) (bool, error) {
		_, err := suite.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("ResourceClaimTemplate %s/%s never appeared: %v", ns, name, err)
	}
}

// nodeStatus is node's status in cd ("" when not listed).
func nodeStatus(cd *cdv1beta1.ComputeDomain, node string) string {
	i := slices.IndexFunc(cd.Status.Nodes, func(n cdv1beta1.ComputeDomainNode) bool { return n.Name == node })
	if i < 0 {
		return ""
	}
	return cd.Status.Nodes[i].Status
}

// readyNodes counts cd's Ready nodes in clique.
func readyNodes(cd *cdv1beta1.ComputeDomain, clique string) int {
	n := 0
	for _, e := range cd.Status.Nodes {
		if e.Status == cdv1beta1.StatusReady && e.CliqueID == clique {
			n++
		}
	}
	return n
}
