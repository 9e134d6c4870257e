package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
)

// TestXIDTaintsDeviceAndNewPodAvoidsIt: an XID on GPU 2 of an 8-GPU node taints gpu-2 in the
// published slice and reports it Unhealthy on kubelet's health stream; of 8 pods wanting one
// GPU each, 7 are scheduled, none on gpu-2, and the 8th waits. When the GPU is declared healthy
// again the taint goes and the waiting pod gets gpu-2.
func TestXIDTaintsDeviceAndNewPodAvoidsIt(t *testing.T) {
	ctx := context.Background()
	n := suite.StartNode(t, NodeSpec{Name: "xid", Machine: "l4x8"})
	health, err := n.Kubelet.WatchHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.InjectXID(ctx, 2, 79); err != nil {
		t.Fatal(err)
	}
	taints, err := waitForTaint(ctx, n.Spec.Name, "gpu-2", true)
	if err != nil {
		t.Fatal(err)
	}
	if taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule || taints[0].Value != "xid-79" {
		t.Errorf("taint %+v, want NoSchedule with value xid-79", taints[0])
	}
	if err := waitUnhealthy(health, "gpu-2"); err != nil {
		t.Error(err)
	}

	const ns = "xid"
	var claims []*resourceapi.ResourceClaim
	var pods []*corev1.Pod
	for i := range 8 {
		name := fmt.Sprintf("g%d", i)
		claims = append(claims, claimSpec(name, "gpu.nvidia.com", "", nil))
		pods = append(pods, podUsing("p-"+name, name))
	}
	createPodsWithClaims(t, n, ns, claims, pods...)
	pending, used, err := waitSevenScheduled(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := suite.Client.CoreV1().Pods(ns).Get(ctx, pending, metav1.GetOptions{}); err == nil {
		t.Logf("pod %s Pending, scheduler: %s", pending, podCondition(p, corev1.PodScheduled).Message)
	}
	if used["gpu-2"] {
		t.Errorf("a pod got the tainted gpu-2: allocated %v", keys(used))
	}
	if err := n.MarkHealthy(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := waitForTaint(ctx, n.Spec.Name, "gpu-2", false); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := suite.Client.CoreV1().Pods(ns).Get(ctx, pending, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" {
			return false, err
		}
		cs, err := podClaims(ctx, p)
		if err != nil || len(cs) != 1 || cs[0].Status.Allocation == nil {
			return false, nil
		}
		if d := cs[0].Status.Allocation.Devices.Results[0].Device; d != "gpu-2" {
			return false, fmt.Errorf("the waiting pod got %s, want the recovered gpu-2", d)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("after recovery, pod %s: %v", pending, err)
	}
}

// waitSevenScheduled waits until 7 of the 8 pods are scheduled and the 8th is Unschedulable;
// it returns the pending pod and the devices allocated.
func waitSevenScheduled(ctx context.Context, ns string) (string, map[string]bool, error) {
	var pending, last string
	used := map[string]bool{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := suite.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pending, used = "", map[string]bool{}
		scheduled := 0
		for i := range list.Items {
			p := &list.Items[i]
			if p.Spec.NodeName == "" {
				if c := podCondition(p, corev1.PodScheduled); c != nil && c.Reason == corev1.PodReasonUnschedulable {
					pending = p.Name
				}
				continue
			}
			cs, err := podClaims(ctx, p)
			if err != nil || len(cs) != 1 || !reservedFor(cs[0], p) {
				return false, nil
			}
			for _, r := range cs[0].Status.Allocation.Devices.Results {
				used[r.Device] = true
			}
			scheduled++
		}
		last = fmt.Sprintf("%d scheduled, pending %q", scheduled, pending)
		return scheduled == 7 && pending != "", nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("want 7 pods scheduled and 1 Unschedulable: %s: %w", last, err)
	}
	return pending, used, nil
}

// waitUnhealthy reads health reports until device is Unhealthy.
func waitUnhealthy(stream interface {
	Recv() (*drahealthv1.NodeWatchResourcesResponse, error)
}, device string) error {
	deadline := time.After(30 * time.Second)
	got := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				got <- fmt.Errorf("health stream: %w", err)
				return
			}
			for _, d := range r.Devices {
				if d.GetDevice().GetDeviceName() == device && d.Health == drahealthv1.HealthStatus_UNHEALTHY {
					got <- nil
					return
				}
			}
		}
	}()
	select {
	case err := <-got:
		return err
	case <-deadline:
		return fmt.Errorf("kubelet's health stream never reported %s Unhealthy", device)
	}
}

// TestHealthzThroughSockets: the chart's liveness probe path answers 200 while the plugin
// serves, and 503 once its sockets are gone.
func TestHealthzThroughSockets(t *testing.T) {
	n := suite.StartNode(t, NodeSpec{Name: "healthz", Machine: "l4x8"})
	url := "http://" + n.Driver.ArgValue("--metrics-addr") + "/healthz"
	code, body := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", url, code, body)
	}
	if code, _ := get(t, "http://"+n.Driver.ArgValue("--metrics-addr")+"/metrics"); code != http.StatusOK {
		t.Errorf("GET /metrics = %d, want 200", code)
	}
	// Kubelet can no longer reach a plugin whose registration socket is gone.
	if err := os.Remove(n.Driver.RegistrationSocket); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, url); code != http.StatusServiceUnavailable {
		t.Errorf("without the registration socket, GET %s = %d %s, want 503", url, code, body)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
