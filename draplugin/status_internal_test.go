package draplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/gpudra/gpudra/internal/checkpoint"
)

// TestStatusWriterDescribesAndRemovesDevices: the writer applies one status.devices entry per
// prepared device (UUIDs, CDI IDs, strategy, share ID, condition Prepared) under the driver's
// field manager, leaves other drivers' entries alone, and removes only its own on unprepare.
// The fake clientset here is the field-managed one, which implements server-side apply.
func TestStatusWriterDescribesAndRemovesDevices(t *testing.T) {
	other := resourceapi.AllocatedDeviceStatus{Driver: "net.example.com", Pool: "node-1", Device: "nic-0"}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-1"},
		Status: resourceapi.ResourceClaimStatus{Devices: []resourceapi.AllocatedDeviceStatus{other}}}
	client := fake.NewClientset(claim)
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	w := newStatusWriter(client, "gpu.nvidia.com", func() time.Time { return now })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx, make(chan struct{}))

	share := types.UID("share-1")
	st := checkpoint.ClaimState{UID: "uid-1", Namespace: "ns", Name: "c", Phase: checkpoint.PrepareCompleted, Devices: []checkpoint.PreparedDevice{
		{Request: "gpu", Pool: "node-1", Device: "gpu-0", GPUUUID: "GPU-0", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-0"}},
		{Request: "mig", Pool: "node-1", Device: "gpu-1-mig-1g5gb-0", GPUUUID: "GPU-1", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-1-mig-1g5gb-0"},
			MIG: &checkpoint.MIGInstance{ParentUUID: "GPU-1", Profile: "1g.5gb", UUID: "MIG-1"}},
	}}
	if err := w.prepared(st, map[string]*types.UID{"mig\x00gpu-1-mig-1g5gb-0": &share}); err != nil {
		t.Fatal(err)
	}
	want := []DeviceStatusData{
		{UUID: "GPU-0", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-0"}, Sharing: "Exclusive"},
		{UUID: "MIG-1", ParentUUID: "GPU-1", MIGProfile: "1g.5gb", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-1-mig-1g5gb-0"}, Sharing: "Exclusive"},
	}
	got := waitForStatus(t, client, func(devs []resourceapi.AllocatedDeviceStatus) bool { return len(devs) == 3 })
	var data []DeviceStatusData
	for _, d := range got {
		if d.Driver != "gpu.nvidia.com" {
			continue
		}
		var v DeviceStatusData
		if err := json.Unmarshal(d.Data.Raw, &v); err != nil {
			t.Fatalf("data of %s: %v", d.Device, err)
		}
		data = append(data, v)
		if len(d.Conditions) != 1 || d.Conditions[0].Type != ConditionPrepared || d.Conditions[0].Status != metav1.ConditionTrue {
			t.Errorf("conditions of %s: %+v", d.Device, d.Conditions)
		}
		if wantShare := d.Device == "gpu-1-mig-1g5gb-0"; (d.ShareID != nil) != wantShare {
			t.Errorf("share ID of %s: %v", d.Device, d.ShareID)
		}
	}
	if diff := cmp.Diff(want, data); diff != "" {
		t.Errorf("status.devices data (-want +got):\n%s", diff)
	}

	w.unprepared("ns", "c", "uid-1")
	got = waitForStatus(t, client, func(devs []resourceapi.AllocatedDeviceStatus) bool { return len(devs) == 1 })
	if diff := cmp.Diff([]resourceapi.AllocatedDeviceStatus{other}, got); diff != "" {
		t.Errorf("status.devices after unprepare (-want +got):\n%s", diff)
	}
}

func waitForStatus(t *testing.T, client *fake.Clientset, done func([]resourceapi.AllocatedDeviceStatus) bool) []resourceapi.AllocatedDeviceStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := client.ResourceV1().ResourceClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if done(c.Status.Devices) {
			return c.Status.Devices
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.devices never as expected: %+v", c.Status.Devices)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStatusWriterResyncRewritesLostWrites: statuses still queued when a plugin process stops
// (or is killed) are lost with it; the next process's writer queues the status of every
// completed claim at start, with the share ID from the claim's record and the time the claim
// was completed as the condition's transition time. A claim still being prepared gets nothing.
func TestStatusWriterResyncRewritesLostWrites(t *testing.T) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-1"}}
	started := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "uid-2"}}
	client := fake.NewClientset(claim, started)
	completedAt := time.Date(2026, 11, 23, 9, 30, 15, 0, time.UTC)
	st := checkpoint.ClaimState{UID: "uid-1", Namespace: "ns", Name: "c", Phase: checkpoint.PrepareCompleted, UpdatedAt: completedAt,
		Devices: []checkpoint.PreparedDevice{{Request: "gpu", Pool: "node-1", Device: "gpu-0", GPUUUID: "GPU-0",
			CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-0"},
			Sharing:      json.RawMessage(`{"applied":true,"devices":[{"strategy":"Exclusive","shareID":"share-7"}]}`)}}}
	inFlight := checkpoint.ClaimState{UID: "uid-2", Namespace: "ns", Name: "s", Phase: checkpoint.PrepareStarted,
		Devices: []checkpoint.PreparedDevice{{Request: "gpu", Pool: "node-1", Device: "gpu-1", GPUUUID: "GPU-1"}}}

	// The first process queues the status and is stopped before its writer runs.
	lost := newStatusWriter(client, "gpu.nvidia.com", time.Now)
	if err := lost.prepared(st, nil); err != nil {
		t.Fatal(err)
	}

	w := newStatusWriter(client, "gpu.nvidia.com", time.Now)
	w.resync([]checkpoint.ClaimState{st, inFlight})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx, make(chan struct{}))
	got := waitForStatus(t, client, func(devs []resourceapi.AllocatedDeviceStatus) bool { return len(devs) == 1 })
	if got[0].Device != "gpu-0" || got[0].ShareID == nil || *got[0].ShareID != "share-7" {
		t.Errorf("status.devices = %+v, want gpu-0 with share ID share-7", got)
	}
	if len(got[0].Conditions) != 1 || !got[0].Conditions[0].LastTransitionTime.Time.Equal(completedAt) {
		t.Errorf("conditions = %+v, want Prepared since %v", got[0].Conditions, completedAt)
	}
	time.Sleep(100 * time.Millisecond) // the writer has had time to write the in-flight claim, had it queued it
	s, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Status.Devices) != 0 {
		t.Errorf("claim still being prepared got status.devices %+v", s.Status.Devices)
	}
}

// TestStatusWritesGiveWayToKubelet: while the plugin keeps queueing (kubelet prepares claim
// after claim), no status is written; the writes come once it has queued nothing for the quiet
// period — or, under a load that never pauses, once a job has waited the maximum delay, counted
// from the first request for its claim (a claim prepared and unprepared again and again is
// written too).
func TestStatusWritesGiveWayToKubelet(t *testing.T) {
	for _, tc := range []struct {
		name            string
		quiet, maxDelay time.Duration
		sameClaim       bool
		wantDuringBurst bool
	}{
		{"writes wait for a quiet moment", time.Second, time.Minute, false, false},
		{"but no longer than the maximum delay", time.Minute, 100 * time.Millisecond, false, true},
		{"also for a claim queued again and again", time.Minute, 100 * time.Millisecond, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const claims = 15
			var objs []runtime.Object
			for i := range claims {
				objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("c", i), UID: types.UID(fmt.Sprint("uid-", i))}})
			}
			client := fake.NewClientset(objs...)
			var mu sync.Mutex
			var writes []time.Time
			client.PrependReactor("patch", "resourceclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				writes = append(writes, time.Now())
				mu.Unlock()
				return false, nil, nil
			})
			w := newStatusWriter(client, "gpu.nvidia.com", time.Now)
			w.quiet, w.maxDelay = tc.quiet, tc.maxDelay
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go w.run(ctx, make(chan struct{}))
			for i := range claims {
				if tc.sameClaim {
					i = 0
				}
				w.unprepared("ns", fmt.Sprint("c", i), types.UID(fmt.Sprint("uid-", i)))
				time.Sleep(20 * time.Millisecond)
			}
			burstEnd := time.Now()
			want := claims
			if tc.sameClaim {
				want = 1
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := len(writes)
				mu.Unlock()
				if n >= want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d statuses written", n, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if during := writes[0].Before(burstEnd); during != tc.wantDuringBurst {
				t.Errorf("first write %v after the burst ended: during the burst = %v, want %v", writes[0].Sub(burstEnd), during, tc.wantDuringBurst)
			}
		})
	}
}

// TestStatusWriterFailedWriteGivesWayToANewerOne: the prepare's status write fails transiently,
// and kubelet unprepares the claim meanwhile; the writer applies the removal in the same round.
// The failed prepare write must not be retried after it: it would describe devices that are no
// longer prepared. Found by review.
func TestStatusWriterFailedWriteGivesWayToANewerOne(t *testing.T) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-1"}}
	client := fake.NewClientset(claim)
	w := newStatusWriter(client, "gpu.nvidia.com", time.Now)
	var mu sync.Mutex
	writes := 0
	client.PrependReactor("patch", "resourceclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		writes++
		if writes == 1 { // the prepare's write: kubelet unprepares while it is in flight, then it fails
			w.unprepared("ns", "c", "uid-1")
			return true, nil, fmt.Errorf("connection reset by peer")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx, make(chan struct{}))
	st := checkpoint.ClaimState{UID: "uid-1", Namespace: "ns", Name: "c", Phase: checkpoint.PrepareCompleted,
		Devices: []checkpoint.PreparedDevice{{Request: "gpu", Pool: "node-1", Device: "gpu-0", GPUUUID: "GPU-0"}}}
	if err := w.prepared(st, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the two writes and a retry after its back-off (100 ms) are over
	c, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if writes < 2 || len(c.Status.Devices) != 0 {
		t.Errorf("after a failed prepare write and the unprepare's: %d writes, status.devices %v; want the removal to stand", writes, c.Status.Devices)
	}
}
