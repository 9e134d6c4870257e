package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// BenchmarkNodePodStart is pod start latency on the real node: from the pod's creation to the
// pod Running and Ready as the API server reports it (a watch opened before the create), for a
// pod without a claim and the same pod with one GPU claim from a ResourceClaimTemplate
// (claim creation by kube-controller-manager, scheduling, prepare through the plugin, CDI
// injection by containerd), and the same pod with one device of dra-example-driver's plugin,
// installed beside this driver's (installPeer). Each round starts one pod of each kind, one at a time, rotating which goes first; the
// medians and the 90th percentiles are reported as custom metrics (ns/op is meaningless here).
// make bench-e2e-node-start runs it.
func BenchmarkNodePodStart(b *testing.B) {
	ctx := context.Background()
	s := suite
	// go test runs a benchmark once with b.N = 1 before the measured run: each run gets a
	// namespace of its own (the previous one may still be terminating).
	ns := fmt.Sprintf("bench-pod-start-%d", time.Now().UnixNano()%1e9)
	if err := framework.CreateNamespace(ctx, s.Client, ns, nil); err != nil {
		b.Fatal(err)
	}
	if err := framework.WaitForServiceAccount(ctx, s.Client, ns, "default"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	s.claimTemplate(ctx, b, ns, "one-gpu", "gpu.nvidia.com", 1)
	s.installPeer(ctx, b)
	s.claimTemplate(ctx, b, ns, "one-peer-gpu", peerDriver, 1)
	kinds := []string{"no-claim", "gpu-claim", "peer-claim"}
	took := map[string][]time.Duration{}
	for i := range b.N {
		for j := range kinds {
			kind := kinds[(i+j)%len(kinds)]
			pod := startPod(ns, fmt.Sprintf("p%d-%s", i, kind), kind)
			took[kind] = append(took[kind], s.timePodStart(ctx, b, pod))
			s.deletePod(ctx, b, pod)
			s.waitClaimsGone(ctx, b, ns)
		}
	}
	b.ReportMetric(0, "ns/op")
	for kind, d := range took {
		b.ReportMetric(float64(percentile(d, 50).Milliseconds()), "ms-p50-"+kind)
		b.ReportMetric(float64(percentile(d, 90).Milliseconds()), "ms-p90-"+kind)
	}
}

// waitClaimsGone waits until the namespace has no ResourceClaim left: the claims generated for
// deleted pods are deallocated and deleted by kube-controller-manager a moment after their pod
// is gone, and a round must not wait for a device a claim of the round before still holds.
func (s *Suite) waitClaimsGone(ctx context.Context, b *testing.B, ns string) {
	b.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := s.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("claims of namespace %s not deleted: %v", ns, err)
	}
}

// startPod is the workload pod of kind: with one GPU claim from the template "one-gpu"
// (gpu-claim), one device of the peer's from "one-peer-gpu" (peer-claim), or none.
func startPod(ns, name, kind string) *corev1.Pod {
	switch kind {
	case "gpu-claim":
		return workloadPod(ns, name, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}, "main")
	case "peer-claim":
		return workloadPod(ns, name, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-peer-gpu")}, "main")
	}
	pod := workloadPod(ns, name, corev1.PodResourceClaim{}, "main")
	pod.Spec.ResourceClaims = nil
	pod.Spec.Containers[0].Resources.Claims = nil
	return pod
}

// timePodStart creates pod and returns how long it took to be Running and Ready, as a watch
// opened before the create sees it.
func (s *Suite) timePodStart(ctx context.Context, b *testing.B, pod *corev1.Pod) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	w, err := s.Client.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if _, err := s.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		if p.Status.Phase == corev1.PodFailed {
			b.Fatalf("pod %s/%s failed: %s", p.Namespace, p.Name, containerStates(p))
		}
		if p.Status.Phase == corev1.PodRunning && podReady(p) {
			return time.Since(start)
		}
	}
	b.Fatalf("pod %s/%s not running within 2 minutes (%v)", pod.Namespace, pod.Name, ctx.Err())
	return 0
}

// percentile returns the p-th percentile (nearest rank) of d.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}
