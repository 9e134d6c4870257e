package node

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// TestNodeXIDHealth (KEP-4680): an XID that means the GPU is lost (79, fallen off the bus)
// makes the plugin taint the device in its ResourceSlice and report it Unhealthy on kubelet's
// health stream; kubelet shows that in the running pod's
// status.containerStatuses[].allocatedResourcesStatus. Marking the GPU healthy again clears both.
func TestNodeXIDHealth(t *testing.T) {
	ctx := context.Background()
	s := suite
	ns := s.namespace(ctx, t)
	s.claimTemplate(ctx, t, ns, "one-gpu", "gpu.nvidia.com", 1)
	pod := s.runPod(ctx, t, workloadPod(ns, "watched", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}, "main"))
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	index := intAttr(s.device(ctx, t, devs[0]), "index")
	// kubelet names a DRA device by the CDI device ID the plugin returned for it (the driver's
	// contract: k8s.gpu.nvidia.com/claim=<claim UID>-<device>).
	resourceID := fmt.Sprintf("k8s.%s/claim=%s-%s", driverName, claim.UID, devs[0])

	s.fakeControl(t, http.MethodPost, fmt.Sprintf("/xid?gpu=%d&xid=79", index), nil)
	s.waitHealth(ctx, t, pod, resourceID, "Unhealthy")
	if taints := s.device(ctx, t, devs[0]).Taints; len(taints) == 0 {
		t.Errorf("device %s has no taint after XID 79", devs[0])
	}

	s.fakeControl(t, http.MethodPost, fmt.Sprintf("/healthy?gpu=%d", index), nil)
	s.waitHealth(ctx, t, pod, resourceID, "Healthy")
	s.deletePod(ctx, t, pod)
}

// waitHealth waits until kubelet reports health for resourceID in the pod's container status.
func (s *Suite) waitHealth(ctx context.Context, t *testing.T, pod *corev1.Pod, resourceID, health string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var seen []string
		for _, c := range p.Status.ContainerStatuses {
			for _, rs := range c.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					seen = append(seen, fmt.Sprintf("%s %s=%s", rs.Name, r.ResourceID, r.Health))
					if string(r.ResourceID) == resourceID && string(r.Health) == health {
						return true, nil
					}
				}
			}
		}
		last = strings.Join(seen, "; ")
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: %s not reported %s in allocatedResourcesStatus (last: %q): %v", pod.Name, resourceID, health, last, err)
	}
}
