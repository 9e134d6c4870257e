package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// TestNodeRollingUpdate (issue 27): the chart's DaemonSet rolls out a new pod template with its
// own update strategy (maxSurge 1, maxUnavailable 0) while a claimed pod runs and new claimed
// pods keep arriving. The new plugin pod starts beside the old one (both exist at once), the
// old one goes once the new one is ready, and then:
//   - the pod that ran before still runs, its container never restarted;
//   - every pod created during the rollout runs and sees exactly its own GPU, no two share one;
//   - every claim was prepared once: exactly one CDI spec each;
//   - deleting the pods unprepares every claim.
func TestNodeRollingUpdate(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claimTemplate(ctx, t, ns, "one-gpu", "gpu.nvidia.com", 1)
	claim := func() corev1.PodResourceClaim {
		return corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}
	}
	before := s.runPod(ctx, t, workloadPod(ns, "before", claim(), "main"))
	old, err := s.pluginPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldUIDs := sets.New[types.UID]()
	for _, p := range old {
		oldUIDs.Insert(p.UID)
	}
	s.rollDaemonSet(ctx, t)

	// New pods arrive every two seconds until the rollout is over (at least three, at most
	// maxDuring: with the pod before, one GPU each, they fit the machine's eight).
	const maxDuring = gpus - 2
	var during []string
	sawBoth := false
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if len(during) < maxDuring {
			name := fmt.Sprintf("during-%d", len(during))
			if _, err := s.Client.CoreV1().Pods(ns).Create(ctx, workloadPod(ns, name, claim(), "main"), metav1.CreateOptions{}); err != nil {
				return false, err
			}
			during = append(during, name)
		}
		pods, err := s.pluginPods(ctx)
		if err != nil {
			return false, err
		}
		oldSeen, newSeen := false, false
		for _, p := range pods {
			if oldUIDs.Has(p.UID) {
				oldSeen = true
			} else {
				newSeen = true
			}
		}
		sawBoth = sawBoth || (oldSeen && newSeen)
		done, _ := s.rolledOut(ctx)
		return done && !oldSeen && len(during) >= 3, nil
	})
	if err != nil {
		t.Fatalf("rollout did not finish: %v\n%s", err, s.daemonSetState(ctx))
	}
	if !sawBoth {
		t.Errorf("never saw the old and the new plugin pod at once: the update did not surge")
	}
	s.checkBeforeKept(ctx, t, before)

	pods := []*corev1.Pod{before}
	for _, name := range during {
		pods = append(pods, s.runningPod(ctx, t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	}
	owner := map[string]string{}
	var claims []string
	for _, pod := range pods {
		c, devs := s.allocatedDevices(ctx, t, pod, "gpu")
		s.checkGPUNodes(ctx, t, pod, devs, "main")
		for _, d := range devs {
			if o, ok := owner[d]; ok {
				t.Errorf("pods %s and %s both got %s", o, pod.Name, d)
			}
			owner[d] = pod.Name
		}
		if specs := s.cdiSpecsOf(t, string(c.UID)); len(specs) != 1 {
			t.Errorf("claim %s of pod %s has CDI specs %v, want one", c.UID, pod.Name, specs)
		}
		claims = append(claims, string(c.UID))
	}
	for _, pod := range pods {
		s.deletePod(ctx, t, pod)
	}
	for _, uid := range claims {
		s.waitUnprepared(ctx, t, uid)
	}
}

// rollDaemonSet changes the plugin DaemonSet's pod template (an annotation), as `helm upgrade`
// with a new image or value does, so that it rolls out with the chart's update strategy.
func (s *Suite) rollDaemonSet(ctx context.Context, t *testing.T) {
	t.Helper()
	dss, err := s.Client.AppsV1().DaemonSets(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=kubelet-plugin"})
	if err != nil || len(dss.Items) != 1 {
		t.Fatalf("the plugin DaemonSet: %v (found %d)", err, len(dss.Items))
	}
	ds := dss.Items[0]
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 {
		t.Fatalf("DaemonSet %s does not surge (update strategy %+v): the suite must install the chart's strategy", ds.Name, ds.Spec.UpdateStrategy)
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"gpudra.test/rollout":"%d"}}}}}`, time.Now().UnixNano())
	if _, err := s.Client.AppsV1().DaemonSets(releaseNamespace).Patch(ctx, ds.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkBeforeKept checks that pod still runs the same container that it ran before the
// rollout.
func (s *Suite) checkBeforeKept(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	now, err := s.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.UID != pod.UID || now.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s: UID %s phase %s, want UID %s Running", pod.Name, now.UID, now.Status.Phase, pod.UID)
	}
	for i, c := range now.Status.ContainerStatuses {
		was := pod.Status.ContainerStatuses[i]
		if c.RestartCount != 0 || c.ContainerID != was.ContainerID {
			t.Errorf("pod %s container %s: %d restarts, container %s (was %s)", pod.Name, c.Name, c.RestartCount, c.ContainerID, was.ContainerID)
		}
	}
}
