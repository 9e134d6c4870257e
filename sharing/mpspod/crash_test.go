package mpspod_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/mpspod"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

// fakeKubelet runs a daemon pod's command (mpspod.Run with a FakeControl) from the pod's
// creation to its deletion, as kubelet would.
type fakeKubelet struct {
	t       *testing.T
	mu      sync.Mutex
	running map[string]func()
}

func newFakeKubelet(t *testing.T, client *fake.Clientset) *fakeKubelet {
	k := &fakeKubelet{t: t, running: map[string]func(){}}
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		k.start(a.(k8stesting.CreateAction).GetObject().(*corev1.Pod))
		return false, nil, nil
	})
	client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		k.stop(a.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
	t.Cleanup(func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, stop := range k.running {
			stop()
		}
	})
	return k
}

func (k *fakeKubelet) start(pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.running[pod.Name]; ok {
		return
	}
	var spec sharing.MPSDaemonSpec
	if err := specOf(pod, &spec); err != nil {
		k.t.Errorf("pod %s: %v", pod.Name, err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mpspod.Run(ctx, spec, &mpspod.FakeControl{Spec: spec}, time.Second)
	}()
	k.running[pod.Name] = func() { cancel(); <-done }
}

func (k *fakeKubelet) stop(name string) {
	k.mu.Lock()
	stop, ok := k.running[name]
	delete(k.running, name)
	k.mu.Unlock()
	if ok {
		stop()
	}
}

// TestCrashBetweenPodAndRecord: a plugin killed after its Prepare created the claim's daemon pod
// but before the record was checkpointed leaks nothing. The checkpointed plan (Plan, recorded
// before Prepare) names the daemon, whose pod name depends on the daemon ID alone: the restarted
// plugin's retried Prepare adopts the same pod, and the undo of the plan (ResetPlan, then Undo)
// deletes it, its directories and its tmpfs.
func TestCrashBetweenPodAndRecord(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root, err := os.MkdirTemp("", "mps") // short: the control socket's path must fit 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	const gpu = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
	client, host := fake.NewClientset(), sharingtest.NewFakeHost(gpu)
	newFakeKubelet(t, client)
	newManager := func() *sharing.Manager {
		d, err := mpspod.New(mpspod.Config{Client: client, Namespace: ns, NodeName: node, Image: "driver:v1", Mounter: host, ReadyTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return sharing.NewManager("gpu.nvidia.com", sharing.WithMPSRoot(root), sharing.WithComputeModeSetter(host), sharing.WithMPSDaemons(d))
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "mps", UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0"}},
			Config: []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim, Requests: []string{"gpu"},
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.nvidia.com",
					Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`)}}}}},
		}}},
	}
	lookup := sharing.DevicesByName(sharing.Device{Name: "gpu-0", UUID: gpu, MemoryBytes: 40 << 30})

	first := newManager()
	plan, err := first.Plan(ctx, claim, lookup) // checkpointed before Prepare
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Prepare(ctx, claim, lookup); err != nil {
		t.Fatal(err)
	}
	// The plugin is killed here: the record is lost, the pod is not.
	pod, err := client.CoreV1().Pods(ns).Get(ctx, mpspod.PodName(node, uid), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the daemon pod of the prepared claim: %v", err)
	}

	// A restarted plugin retries the prepare: it adopts the pod.
	if _, err := newManager().Prepare(ctx, claim, lookup); err != nil {
		t.Fatalf("retried Prepare: %v", err)
	}
	again, err := client.CoreV1().Pods(ns).Get(ctx, mpspod.PodName(node, uid), metav1.GetOptions{})
	if err != nil || again.UID != pod.UID {
		t.Errorf("retried Prepare: pod %v (%v), want the same pod %s adopted", again.UID, err, pod.UID)
	}

	// Another restarted plugin finds only the plan and undoes it.
	m := newManager()
	if err := m.Undo(ctx, m.ResetPlan(plan)); err != nil {
		t.Fatalf("undoing the recorded plan: %v", err)
	}
	if _, err := client.CoreV1().Pods(ns).Get(ctx, mpspod.PodName(node, uid), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the plan's undo the daemon pod is still there (%v)", err)
	}
	if st := host.State(); len(st.Mounts) != 0 || st.ComputeModes[gpu] != sharing.ComputeModeDefault {
		t.Errorf("after the plan's undo: mounts %v, compute mode %s", st.Mounts, st.ComputeModes[gpu])
	}
}

// specOf reads the daemon spec a daemon pod's command gets.
func specOf(pod *corev1.Pod, spec *sharing.MPSDaemonSpec) error {
	return jsonArg(pod.Spec.Containers[0].Args[0], spec)
}
