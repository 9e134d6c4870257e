package sharing_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func ctxFor(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

// TestPrepareUndo prepares each strategy on a fake host, checks the host during, and checks
// that Undo leaves the host state exactly as before.
func TestPrepareUndo(t *testing.T) {
	mps50 := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"8Gi","defaultPerDevicePinnedMemoryLimit":{"1":"4Gi"}}}}`
	tests := []struct {
		name      string
		setup     func(h *sharingtest.FakeHost)
		claim     *resourceapi.ResourceClaim
		wantCalls []string
		during    func(t *testing.T, s sharingtest.HostState)
	}{
		{
			name:      "exclusive",
			claim:     newClaim(uidU1, results(result("gpu", "gpu-0"))),
			wantCalls: nil,
		},
		{
			name:  "time-slicing",
			claim: newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(tsLong, "gpu")),
			wantCalls: []string{"ComputeMode " + uuidA, "TimeSlice " + uuidA, "SetTimeSlice " + uuidA + " 3",
				"SetTimeSlice " + uuidA + " 0"},
			during: func(t *testing.T, s sharingtest.HostState) {
				if s.TimeSlices[uuidA] != 3 {
					t.Errorf("time slice during = %d, want 3", s.TimeSlices[uuidA])
				}
			},
		},
		{
			name: "time-slicing from a non-default compute mode and time slice",
			setup: func(h *sharingtest.FakeHost) {
				h.SetComputeModeState(uuidA, sharing.ComputeModeProhibited)
				h.SetTimeSliceState(uuidA, 2)
			},
			claim: newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(tsShort, "gpu")),
			wantCalls: []string{"ComputeMode " + uuidA, "SetComputeMode " + uuidA + " DEFAULT", "TimeSlice " + uuidA, "SetTimeSlice " + uuidA + " 1",
				"SetTimeSlice " + uuidA + " 2", "SetComputeMode " + uuidA + " PROHIBITED"},
		},
		{
			name:      "time-slicing already at the wanted value changes nothing",
			claim:     newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(tsDefault, "gpu")),
			wantCalls: []string{"ComputeMode " + uuidA, "TimeSlice " + uuidA},
		},
		{
			name:  "MPS on two GPUs",
			claim: newClaim(uidU1, results(result("gpu", "gpu-0"), result("gpu", "gpu-1")), claimCfg(mps50, "gpu")),
			wantCalls: []string{"ComputeMode " + uuidA, "SetComputeMode " + uuidA + " EXCLUSIVE_PROCESS", "ComputeMode " + uuidB, "SetComputeMode " + uuidB + " EXCLUSIVE_PROCESS",
				"Start " + uidU1, "Ready " + uidU1,
				"Stop " + uidU1, "SetComputeMode " + uuidB + " DEFAULT", "SetComputeMode " + uuidA + " DEFAULT"},
			during: func(t *testing.T, s sharingtest.HostState) {
				d, ok := s.Daemons[uidU1]
				if !ok {
					t.Fatalf("no daemon u1 during prepare: %v", s.Daemons)
				}
				want := sharing.MPSDaemonSpec{ID: uidU1, DeviceUUIDs: []string{uuidA, uuidB}, Dir: "/var/lib/kubelet/plugins/gpu.nvidia.com/mps/" + uidU1,
					PipeDir: "/var/lib/kubelet/plugins/gpu.nvidia.com/mps/" + uidU1 + "/pipe", LogDir: "/var/lib/kubelet/plugins/gpu.nvidia.com/mps/" + uidU1 + "/log",
					ShmDir: "/var/lib/kubelet/plugins/gpu.nvidia.com/mps/" + uidU1 + "/shm", ActiveThreadPercentage: new(50),
					PinnedMemoryLimits: map[string]string{"0": "8192M", "1": "4096M"}, ShmSizeBytes: 1 << 30}
				if diff := cmp.Diff(want, d); diff != "" {
					t.Errorf("daemon (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:  "MPS on a MIG device leaves its sibling alone",
			claim: newClaim(uidU1, results(result("mig", "gpu-2-mig-1g5gb-0")), claimCfg(mpsMIG, "mig")),
			wantCalls: []string{"ComputeMode " + uuidM1, "SetComputeMode " + uuidM1 + " EXCLUSIVE_PROCESS", "Start " + uidU1, "Ready " + uidU1,
				"Stop " + uidU1, "SetComputeMode " + uuidM1 + " DEFAULT"},
			during: func(t *testing.T, s sharingtest.HostState) {
				if s.ComputeModes[uuidM2] != sharing.ComputeModeDefault || s.ComputeModes[uuidC] != sharing.ComputeModeDefault {
					t.Errorf("sibling MIG device or parent changed: %v", s.ComputeModes)
				}
			},
		},
		{
			// A share of a GPU gets a daemon of its own whose server enforces the share, in
			// compute mode DEFAULT so that other shares' servers fit beside it.
			name:      "fractional memory runs under MPS",
			claim:     newClaim(uidU1, results(withMemory(shared(result("gpu", "gpu-0"), "s1"), "16Gi"))),
			wantCalls: []string{"ComputeMode " + uuidA, "Start " + uidU1, "Ready " + uidU1, "Stop " + uidU1},
			during: func(t *testing.T, s sharingtest.HostState) {
				if got := s.Daemons[uidU1].PinnedMemoryLimits; !maps.Equal(got, map[string]string{"0": "16384M"}) {
					t.Errorf("the share's daemon has pinned memory limits %v, want 0=16384M", got)
				}
				if s.ComputeModes[uuidA] != sharing.ComputeModeDefault {
					t.Errorf("compute mode of the shared GPU = %s, want DEFAULT", s.ComputeModes[uuidA])
				}
			},
		},
		{
			// One daemon serves every MPS device of a claim, shares of two GPUs included.
			name:      "shares of two GPUs in one claim",
			claim:     newClaim(uidU1, results(withMemory(shared(result("a", "gpu-0"), "s1"), "1Gi"), withMemory(shared(result("b", "gpu-1"), "s2"), "2Gi"))),
			wantCalls: []string{"ComputeMode " + uuidA, "ComputeMode " + uuidB, "Start " + uidU1, "Ready " + uidU1, "Stop " + uidU1},
			during: func(t *testing.T, s sharingtest.HostState) {
				if got := s.Daemons[uidU1]; !cmp.Equal(got.DeviceUUIDs, []string{uuidA, uuidB}) || !maps.Equal(got.PinnedMemoryLimits, map[string]string{"0": "1024M", "1": "2048M"}) {
					t.Errorf("daemon serves %v with limits %v, want [%s %s] with 0=1024M 1=2048M", got.DeviceUUIDs, got.PinnedMemoryLimits, uuidA, uuidB)
				}
			},
		},
		{
			// A GPU the claim has to itself goes EXCLUSIVE_PROCESS, its share of another stays DEFAULT.
			name:  "an own GPU and a share of another in one claim",
			claim: newClaim(uidU1, results(result("a", "gpu-1"), withMemory(shared(result("b", "gpu-0"), "s2"), "1Gi")), claimCfg(mpsGPU, "a")),
			wantCalls: []string{"ComputeMode " + uuidB, "SetComputeMode " + uuidB + " EXCLUSIVE_PROCESS", "ComputeMode " + uuidA, "Start " + uidU1, "Ready " + uidU1,
				"Stop " + uidU1, "SetComputeMode " + uuidB + " DEFAULT"},
		},
		{
			name: "a share of a GPU in EXCLUSIVE_PROCESS sets DEFAULT",
			setup: func(h *sharingtest.FakeHost) {
				h.SetComputeModeState(uuidA, sharing.ComputeModeExclusiveProcess)
			},
			claim: newClaim(uidU1, results(withMemory(shared(result("gpu", "gpu-0"), "s1"), "16Gi"))),
			wantCalls: []string{"ComputeMode " + uuidA, "SetComputeMode " + uuidA + " DEFAULT", "Start " + uidU1, "Ready " + uidU1,
				"Stop " + uidU1, "SetComputeMode " + uuidA + " EXCLUSIVE_PROCESS"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxFor(t)
			h := newHost()
			if tt.setup != nil {
				tt.setup(h)
			}
			before := h.State()
			m := newManager(t, h)
			rec, err := m.Prepare(ctx, tt.claim, lookup)
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if tt.during != nil {
				tt.during(t, h.State())
			}
			// The record survives a checkpoint.
			var restored sharing.Record
			if err := json.Unmarshal(mustJSON(t, rec), &restored); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(*rec, restored); diff != "" {
				t.Errorf("record JSON round trip (-want +got):\n%s", diff)
			}
			if err := m.Undo(ctx, &restored); err != nil {
				t.Fatalf("Undo: %v", err)
			}
			if diff := cmp.Diff(before, h.State()); diff != "" {
				t.Errorf("host state after Undo (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, h.Calls()); diff != "" {
				t.Errorf("host calls (-want +got):\n%s", diff)
			}
			if len(m.Registry().List()) != 0 {
				t.Errorf("registry not empty after Undo: %+v", m.Registry().List())
			}
		})
	}
}

func TestTimeSliceUnknownRestoresDefault(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	h.HideTimeSlice()
	m := newManager(t, h)
	rec, err := m.Prepare(ctx, newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(tsDefault, "gpu")), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Undo(ctx, rec); err != nil {
		t.Fatal(err)
	}
	want := []string{"ComputeMode " + uuidA, "TimeSlice " + uuidA, "SetTimeSlice " + uuidA + " 0", "SetTimeSlice " + uuidA + " 0"}
	if diff := cmp.Diff(want, h.Calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestPrepareRollsBack(t *testing.T) {
	for _, failing := range []string{"Start " + uidU1, "Ready " + uidU1, "SetComputeMode " + uuidB + " EXCLUSIVE_PROCESS"} {
		t.Run(failing, func(t *testing.T) {
			ctx := ctxFor(t)
			h := newHost()
			before := h.State()
			h.FailOn(failing, errors.New("injected"))
			m := newManager(t, h)
			_, err := m.Prepare(ctx, newClaim(uidU1, results(result("gpu", "gpu-0"), result("gpu", "gpu-1")), claimCfg(mpsGPU, "gpu")), lookup)
			if err == nil || !strings.Contains(err.Error(), "injected") || !strings.HasPrefix(err.Error(), "claim ns/claim-"+uidU1+" ("+uidU1+"): ") {
				t.Fatalf("Prepare error = %v, want the injected error with the claim", err)
			}
			if diff := cmp.Diff(before, h.State()); diff != "" {
				t.Errorf("host state after failed Prepare (-before +after):\n%s", diff)
			}
			if len(m.Registry().List()) != 0 {
				t.Errorf("failed claim registered")
			}
		})
	}
}

func TestUndoFailureKeepsClaim(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	before := h.State()
	m := newManager(t, h)
	rec, err := m.Prepare(ctx, newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(mpsGPU, "gpu")), lookup)
	if err != nil {
		t.Fatal(err)
	}
	h.FailOn("Stop "+uidU1, errors.New("busy"))
	if err := m.Undo(ctx, rec); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("Undo error = %v, want busy", err)
	}
	if _, ok := m.Registry().Get(uidU1); !ok {
		t.Fatal("claim forgotten after a failed Undo")
	}
	h.FailOn("Stop "+uidU1, nil)
	if err := m.UndoClaim(ctx, uidU1); err != nil {
		t.Fatalf("retried Undo: %v", err)
	}
	if diff := cmp.Diff(before, h.State()); diff != "" {
		t.Errorf("host state after retried Undo (-before +after):\n%s", diff)
	}
}

func TestPrepareIdempotent(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	m := newManager(t, h)
	claim := newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(mpsGPU, "gpu"))
	first, err := m.Prepare(ctx, claim, lookup)
	if err != nil {
		t.Fatal(err)
	}
	h.ResetCalls()
	// Seed 002: one claim used by several pods or containers is prepared again, not a conflict.
	second, err := m.Prepare(ctx, claim, lookup)
	if err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("second Prepare differs (-first +second):\n%s", diff)
	}
	if calls := h.Calls(); len(calls) != 0 {
		t.Errorf("second Prepare touched the host: %v", calls)
	}
}

func TestConflicts(t *testing.T) {
	tests := []struct {
		name    string
		first   *resourceapi.ResourceClaim
		second  *resourceapi.ResourceClaim
		wantErr string
	}{
		{
			name:    "exclusive vs shared",
			first:   newClaim(uidA, results(result("gpu", "gpu-0"))),
			second:  newClaim(uidB, results(result("gpu", "gpu-0")), claimCfg(tsShort, "gpu")),
			wantErr: `claim ns/claim-` + uidB + ` (` + uidB + `): device "gpu-0" (` + uuidA + `) of request "gpu" with TimeSlicing (time slice 1) conflicts with claim ns/claim-` + uidA + ` (` + uidA + `), prepared with device "gpu-0" (` + uuidA + `) of request "gpu" with Exclusive: the device is allocated to both claims, but not as a shared device (no share ID)`,
		},
		{
			name:    "TimeSlicing vs MPS",
			first:   newClaim(uidA, results(shared(result("gpu", "gpu-0"), "s1")), claimCfg(tsShort, "gpu")),
			second:  newClaim(uidB, results(shared(result("gpu", "gpu-0"), "s2")), claimCfg(mpsGPU, "gpu")),
			wantErr: `claim ns/claim-` + uidB + ` (` + uidB + `): device "gpu-0" (` + uuidA + `) of request "gpu" with MPS conflicts with claim ns/claim-` + uidA + ` (` + uidA + `), prepared with device "gpu-0" (` + uuidA + `) of request "gpu" with TimeSlicing (time slice 1): claims sharing a device must use the same sharing strategy`,
		},
		{
			name:    "two intervals",
			first:   newClaim(uidA, results(shared(result("gpu", "gpu-0"), "s1")), claimCfg(tsShort, "gpu")),
			second:  newClaim(uidB, results(shared(result("gpu", "gpu-0"), "s2")), claimCfg(tsLong, "gpu")),
			wantErr: `claim ns/claim-` + uidB + ` (` + uidB + `): device "gpu-0" (` + uuidA + `) of request "gpu" with TimeSlicing (time slice 3) conflicts with claim ns/claim-` + uidA + ` (` + uidA + `), prepared with device "gpu-0" (` + uuidA + `) of request "gpu" with TimeSlicing (time slice 1): a GPU has one time slice; claims sharing it must ask for the same interval`,
		},
		{
			name:    "whole GPU vs its MIG device",
			first:   newClaim(uidA, results(result("gpu", "gpu-2"))),
			second:  newClaim(uidB, results(result("mig", "gpu-2-mig-1g5gb-0"))),
			wantErr: `claim ns/claim-` + uidB + ` (` + uidB + `): device "gpu-2-mig-1g5gb-0" (` + uuidM1 + `) of request "mig" with Exclusive conflicts with claim ns/claim-` + uidA + ` (` + uidA + `), prepared with device "gpu-2" (` + uuidC + `) of request "gpu" with Exclusive: a GPU used whole cannot also serve one of its MIG devices`,
		},
		{
			name:   "MIG devices of one GPU are independent",
			first:  newClaim(uidA, results(result("mig", "gpu-2-mig-1g5gb-0")), claimCfg(mpsMIG, "mig")),
			second: newClaim(uidB, results(result("mig", "gpu-2-mig-1g5gb-1"))),
		},
		{
			name:   "same interval on a shared GPU",
			first:  newClaim(uidA, results(shared(result("gpu", "gpu-0"), "s1")), claimCfg(tsShort, "gpu")),
			second: newClaim(uidB, results(shared(result("gpu", "gpu-0"), "s2")), claimCfg(tsShort, "gpu")),
		},
		{
			name:   "different GPUs",
			first:  newClaim(uidA, results(result("gpu", "gpu-0")), claimCfg(tsShort, "gpu")),
			second: newClaim(uidB, results(result("gpu", "gpu-1")), claimCfg(tsLong, "gpu")),
		},
		{
			name:  "admin access never conflicts",
			first: newClaim(uidA, results(result("gpu", "gpu-0")), claimCfg(mpsGPU, "gpu")),
			second: func() *resourceapi.ResourceClaim {
				r := result("gpu", "gpu-0")
				r.AdminAccess = new(true)
				return newClaim(uidB, results(r))
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxFor(t)
			h := newHost()
			m := newManager(t, h)
			if _, err := m.Prepare(ctx, tt.first, lookup); err != nil {
				t.Fatalf("first Prepare: %v", err)
			}
			afterFirst := h.State()
			_, err := m.Prepare(ctx, tt.second, lookup)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("second Prepare: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("second Prepare error\n got: %v\nwant: %s", err, tt.wantErr)
			}
			if diff := cmp.Diff(afterFirst, h.State()); diff != "" {
				t.Errorf("refused claim changed the host (-before +after):\n%s", diff)
			}
		})
	}
}

// TestSharedDevice: two fractional claims on one GPU get a daemon each, whose server enforces
// the claim's share (the containers' environment does not carry it), and share the GPU's
// compute mode DEFAULT; undoing one stops only its daemon, and the host goes back to its first
// state when the last one is undone, also across a restart (Restore from checkpointed records).
func TestSharedDevice(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	h.SetComputeModeState(uuidA, sharing.ComputeModeExclusiveProcess)
	before := h.State()
	m := newManager(t, h)
	a, err := m.Prepare(ctx, newClaim(uidA, results(withMemory(shared(result("gpu", "gpu-0"), "s1"), "16Gi"))), lookup)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Prepare(ctx, newClaim(uidB, results(withMemory(shared(result("gpu", "gpu-0"), "s2"), "32Gi"))), lookup)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rec   *sharing.Record
		limit string
	}{{a, "16384M"}, {b, "32768M"}} {
		if got, want := c.rec.Devices[0].Edits.Env, []string{"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"}; !cmp.Equal(got, want) {
			t.Errorf("claim %s env = %v, want %v", c.rec.ClaimUID, got, want)
		}
		id := c.rec.Devices[0].MPSDaemonID
		if id != string(c.rec.ClaimUID) {
			t.Errorf("claim %s is served by daemon %q, want its own", c.rec.ClaimUID, id)
		}
		if got := h.State().Daemons[id].PinnedMemoryLimits; !maps.Equal(got, map[string]string{"0": c.limit}) {
			t.Errorf("daemon of claim %s has pinned memory limits %v, want 0=%s", c.rec.ClaimUID, got, c.limit)
		}
	}
	if got := h.State().ComputeModes[uuidA]; got != sharing.ComputeModeDefault {
		t.Errorf("compute mode of the shared GPU = %s, want DEFAULT", got)
	}

	// Restart: a new manager restored from the checkpoint.
	m = newManager(t, h)
	if err := m.Restore([]sharing.Record{*a, *b}); err != nil {
		t.Fatal(err)
	}
	if err := m.Undo(ctx, a); err != nil {
		t.Fatal(err)
	}
	after := h.State()
	if _, ok := after.Daemons[uidA]; ok {
		t.Errorf("the first claim's daemon runs after its Undo")
	}
	if _, ok := after.Daemons[uidB]; !ok || after.ComputeModes[uuidA] != sharing.ComputeModeDefault {
		t.Errorf("undoing the first claim took the second's daemon or compute mode: daemons %v, compute mode %s", after.Daemons, after.ComputeModes[uuidA])
	}
	if err := m.Undo(ctx, b); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, h.State()); diff != "" {
		t.Errorf("host state after both Undos (-before +after):\n%s", diff)
	}
}

// TestShared: a claim whose every host setting another claim already made only joins them (its
// plan and its record are Shared): a second time-slicing share of a GPU. A share under MPS
// never is, since it starts a daemon of its own; the record of the claim left last is not
// either, and its Undo restores the host.
func TestShared(t *testing.T) {
	ctx := ctxFor(t)
	m := newManager(t, newHost())
	claimA := newClaim(uidA, results(shared(result("gpu", "gpu-0"), "s1")), claimCfg(tsShort, "gpu"))
	claimB := newClaim(uidB, results(shared(result("gpu", "gpu-0"), "s2")), claimCfg(tsShort, "gpu"))
	claimC := newClaim(uidC, results(shared(result("gpu", "gpu-1"), "s3")), claimCfg(tsShort, "gpu"))
	mpsD := newClaim(uidU1, results(withMemory(shared(result("gpu", "gpu-3"), "s4"), "1Gi")))
	mpsE := newClaim(uidU2, results(withMemory(shared(result("gpu", "gpu-3"), "s5"), "1Gi")))
	shared := func(what string, rec *sharing.Record, err error, want bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := m.Shared(rec); got != want {
			t.Errorf("Shared(%s) = %v, want %v", what, got, want)
		}
	}
	planA, err := m.Plan(ctx, claimA, lookup)
	shared("plan of the first share", planA, err, false)
	a, err := m.Prepare(ctx, claimA, lookup)
	shared("record of the only share", a, err, false)
	planB, err := m.Plan(ctx, claimB, lookup)
	shared("plan of a second share of the GPU", planB, err, true)
	b, err := m.Prepare(ctx, claimB, lookup)
	shared("record of a second share", b, err, true)
	shared("record of the first share, with a second", a, nil, true)
	planC, err := m.Plan(ctx, claimC, lookup)
	shared("plan of a share of another GPU", planC, err, false)
	if err := m.Undo(ctx, a); err != nil {
		t.Fatal(err)
	}
	shared("record of the share left last", b, nil, false)
	shared("no record", nil, nil, true)

	d, err := m.Prepare(ctx, mpsD, lookup)
	shared("record of a first MPS share", d, err, false)
	e, err := m.Prepare(ctx, mpsE, lookup)
	shared("record of a second MPS share, with a daemon of its own", e, err, false)
}

// TestSharedDeviceOfEarlierVersion: a share recorded by an earlier version, which started one
// "shared-…" MPS daemon for all shares of a GPU and set the GPU to EXCLUSIVE_PROCESS (the
// record is that version's own golden file, testdata/earlier-version-share.json, from
// adb1230), is restored as recorded. A new share of the GPU is refused naming the old claim,
// and changes nothing on the host; once the old claim is unprepared (its daemon stopped, the
// GPU back to DEFAULT), the new share prepares with a daemon of its own.
func TestSharedDeviceOfEarlierVersion(t *testing.T) {
	const oldUID = "11111111-2222-3333-4444-555555555558"
	ctx := ctxFor(t)
	data, err := os.ReadFile(filepath.Join("testdata", "earlier-version-share.json"))
	if err != nil {
		t.Fatal(err)
	}
	var old sharing.Record
	if err := json.Unmarshal(data, &old); err != nil {
		t.Fatal(err)
	}
	h := newHost()
	h.SetComputeModeState(uuidA, sharing.ComputeModeExclusiveProcess)
	for _, s := range old.Steps {
		if s.Daemon != nil {
			if err := h.Start(ctx, *s.Daemon); err != nil { // the earlier version's daemon runs
				t.Fatal(err)
			}
		}
	}
	m := newManager(t, h)
	if err := m.Restore([]sharing.Record{old}); err != nil {
		t.Fatal(err)
	}
	before := h.State()
	newShare := newClaim(uidB, results(withMemory(shared(result("gpu", "gpu-0"), "s2"), "16Gi")))
	_, err = m.Prepare(ctx, newShare, lookup)
	want := "device " + uuidA + " needs compute mode DEFAULT, but claim ns/claim-" + oldUID + " (" + oldUID + ") holds it in EXCLUSIVE_PROCESS"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Prepare error = %v, want one containing %q", err, want)
	}
	if diff := cmp.Diff(before, h.State()); diff != "" {
		t.Errorf("the refused claim changed the host (-before +after):\n%s", diff)
	}
	if err := m.Undo(ctx, &old); err != nil {
		t.Fatalf("unprepare of the earlier version's share: %v", err)
	}
	if st := h.State(); st.ComputeModes[uuidA] != sharing.ComputeModeDefault || len(st.Daemons) != 0 {
		t.Fatalf("after the earlier version's share is undone: compute mode %s, daemons %v; want DEFAULT and none", st.ComputeModes[uuidA], st.Daemons)
	}
	rec, err := m.Prepare(ctx, newShare, lookup)
	if err != nil {
		t.Fatalf("the new share once the old one is gone: %v", err)
	}
	if daemons := h.State().Daemons; len(daemons) != 1 || daemons[string(rec.ClaimUID)].ID == "" {
		t.Errorf("daemons after the new share: %v, want its own", daemons)
	}
}

func TestPlanErrors(t *testing.T) {
	mpsPct := func(p string) string {
		return `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":` + p + `}}}`
	}
	perDevice := func(m string) string {
		return `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPerDevicePinnedMemoryLimit":` + m + `}}}`
	}
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		wantErr string
	}{
		{
			name:    "time-slicing a memory fraction",
			claim:   newClaim(uidU, results(withMemory(shared(result("gpu", "gpu-0"), "s"), "16Gi")), claimCfg(tsShort, "gpu")),
			wantErr: `claim ns/claim-` + uidU + ` (` + uidU + `): device "gpu-0" (GPU ` + uuidA + `) of request "gpu", config[0] (GpuConfig from claim, requests [gpu]): the device was allocated 17179869184 bytes of its memory, which TimeSlicing cannot enforce; use strategy MPS or no sharing config`,
		},
		{
			name:    "limit above the allocation",
			claim:   newClaim(uidU, results(withMemory(shared(result("gpu", "gpu-0"), "s"), "16Gi")), claimCfg(perDevice(`{"0":"20Gi"}`), "gpu")),
			wantErr: `claim ns/claim-` + uidU + ` (` + uidU + `): device "gpu-0" (GPU ` + uuidA + `) of request "gpu", config[0] (GpuConfig from claim, requests [gpu]): pinned memory limit 20480Mi exceeds the 16384Mi of device memory allocated to the claim`,
		},
		{
			name:    "per-device index out of range",
			claim:   newClaim(uidU, results(result("gpu", "gpu-0")), claimCfg(perDevice(`{"1":"2Gi"}`), "gpu")),
			wantErr: `claim ns/claim-` + uidU + ` (` + uidU + `): device "gpu-0" (GPU ` + uuidA + `) of request "gpu", config[0] (GpuConfig from claim, requests [gpu]): defaultPerDevicePinnedMemoryLimit[1]: the config applies to 1 device(s), indices 0..0`,
		},
		{
			name:    "per-device UUID not allocated",
			claim:   newClaim(uidU, results(result("gpu", "gpu-0")), claimCfg(perDevice(`{"`+uuidB+`":"2Gi"}`), "gpu")),
			wantErr: `claim ns/claim-` + uidU + ` (` + uidU + `): device "gpu-0" (GPU ` + uuidA + `) of request "gpu", config[0] (GpuConfig from claim, requests [gpu]): defaultPerDevicePinnedMemoryLimit[` + uuidB + `]: no device with that UUID is allocated under this config`,
		},
		{
			name:    "index and UUID name one device",
			claim:   newClaim(uidU, results(result("gpu", "gpu-0")), claimCfg(perDevice(`{"0":"2Gi","`+uuidA+`":"3Gi"}`), "gpu")),
			wantErr: `claim ns/claim-` + uidU + ` (` + uidU + `): device "gpu-0" (GPU ` + uuidA + `) of request "gpu", config[0] (GpuConfig from claim, requests [gpu]): defaultPerDevicePinnedMemoryLimit: keys "0" and "` + uuidA + `" both name this device; keep one`,
		},
		{
			name:    "two thread percentages on one daemon",
			claim:   newClaim(uidU, results(result("a", "gpu-0"), result("b", "gpu-1")), claimCfg(mpsPct("10"), "a"), claimCfg(mpsPct("20"), "b")),
			wantErr: `claim ns/claim-` + uidU + ` (` + uidU + `): requests "a" (config[0] (GpuConfig from claim, requests [a])) and "b" (config[1] (GpuConfig from claim, requests [b])) set different MPS defaultActiveThreadPercentage (10 and 20), but the claim's devices share one MPS control daemon; use one value`,
		},
		{
			name: "one shared device twice with two thread percentages",
			claim: newClaim(uidU, results(shared(result("a", "gpu-0"), "s1"), shared(result("b", "gpu-0"), "s2")),
				claimCfg(mpsPct("10"), "a"), claimCfg(mpsPct("20"), "b")),
			wantErr: `claim ns/claim-` + uidU + ` (` + uidU + `): requests "a" (config[0] (GpuConfig from claim, requests [a])) and "b" (config[1] (GpuConfig from claim, requests [b])) set different MPS defaultActiveThreadPercentage (10 and 20)`,
		},
	}
	m := newManager(t, newHost())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Plan(ctxFor(t), tt.claim, lookup)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("Plan error\n got: %v\nwant: %s", err, tt.wantErr)
			}
		})
	}
}

func TestMissingHostInterfaces(t *testing.T) {
	m := sharing.NewManager("gpu.nvidia.com")
	_, err := m.Prepare(ctxFor(t), newClaim(uidU, results(result("gpu", "gpu-0")), claimCfg(tsShort, "gpu")), lookup)
	if err == nil || !strings.Contains(err.Error(), "WithComputeModeSetter") {
		t.Fatalf("Prepare without host = %v, want an error naming WithComputeModeSetter", err)
	}
}

// TestGoldenEdits pins the container edits (and the rest of the record) of MPS,
// time-slicing and fractional claims. Run with -update to rewrite testdata/*.golden.
func TestGoldenEdits(t *testing.T) {
	mpsFull := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":25,"defaultPinnedDeviceMemoryLimit":"16Gi","defaultPerDevicePinnedMemoryLimit":{"` + uuidB + `":"10000Mi"}}}}`
	tests := map[string]*resourceapi.ResourceClaim{
		"mps":         newClaim("11111111-2222-3333-4444-555555555555", results(result("gpu", "gpu-0"), result("gpu", "gpu-1")), claimCfg(mpsFull, "gpu")),
		"mps-mig":     newClaim("11111111-2222-3333-4444-555555555556", results(result("mig", "gpu-2-mig-1g5gb-0")), classCfg(mpsMIG)),
		"timeslicing": newClaim("11111111-2222-3333-4444-555555555557", results(result("gpu", "gpu-0")), claimCfg(tsMedium(), "gpu")),
		"fractional":  newClaim("11111111-2222-3333-4444-555555555558", results(withMemory(shared(result("gpu", "gpu-0"), "share-1"), "16Gi"))),
	}
	for name, claim := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHost()
			rec, err := newManager(t, h).Prepare(ctxFor(t), claim, lookup)
			if err != nil {
				t.Fatal(err)
			}
			got := mustJSON(t, rec)
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("record differs from %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

func tsMedium() string {
	return `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Medium"}}}`
}

// TestSameDeviceTwice (defect 10): consumable capacity lets one claim get the same device
// twice, each result with its own share ID (here two requests). Both results use the claim's
// one daemon, which serves the device once and enforces the sum of the shares; the host is set
// up once.
func TestSameDeviceTwice(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	before := h.State()
	m := newManager(t, h)
	claim := newClaim(uidU1, results(withMemory(shared(result("a", "gpu-0"), "s1"), "16Gi"), withMemory(shared(result("b", "gpu-0"), "s2"), "8Gi")),
		claimCfg(mpsGPU, "a", "b"))
	rec, err := m.Prepare(ctx, claim, lookup)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	for i, d := range rec.Devices {
		if d.MPSDaemonID != uidU1 {
			t.Errorf("device %d (request %q): daemon %q, want the claim's own %q", i, d.Request, d.MPSDaemonID, uidU1)
		}
		if diff := cmp.Diff([]string{"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"}, d.Edits.Env); diff != "" {
			t.Errorf("device %d env (-want +got):\n%s", i, diff)
		}
	}
	wantCalls := []string{"ComputeMode " + uuidA, "Start " + uidU1, "Ready " + uidU1}
	if diff := cmp.Diff(wantCalls, h.Calls()); diff != "" {
		t.Errorf("host calls (-want +got):\n%s", diff)
	}
	// The device is served once (ordinal 0) and the claim holds 16Gi + 8Gi of it.
	d := h.State().Daemons[uidU1]
	if !cmp.Equal(d.DeviceUUIDs, []string{uuidA}) || !maps.Equal(d.PinnedMemoryLimits, map[string]string{"0": "24576M"}) {
		t.Errorf("daemon serves %v with limits %v, want [%s] with 0=24576M", d.DeviceUUIDs, d.PinnedMemoryLimits, uuidA)
	}
	if err := m.Undo(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, h.State()); diff != "" {
		t.Errorf("host state after Undo (-before +after):\n%s", diff)
	}
}

// TestNilArguments: nil arguments are errors, not panics.
func TestNilArguments(t *testing.T) {
	ctx := ctxFor(t)
	m := newManager(t, newHost())
	claim := newClaim(uidU, results(result("gpu", "gpu-0")))
	if _, err := m.Prepare(ctx, nil, lookup); err == nil {
		t.Error("Prepare(nil claim) succeeded")
	}
	if _, err := m.Prepare(ctx, claim, nil); err == nil {
		t.Error("Prepare(nil lookup) succeeded")
	}
	if _, err := m.Plan(ctx, nil, lookup); err == nil {
		t.Error("Plan(nil claim) succeeded")
	}
	if err := m.Undo(ctx, nil); err == nil {
		t.Error("Undo(nil) succeeded")
	}
}

// TestPlanRecordsPreviousValues: Plan reads, without changing anything, what Prepare would
// replace, so that ResetPlan restores an operator's settings rather than the defaults after a
// crash between Prepare's changes and their record.
func TestPlanRecordsPreviousValues(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	h.SetTimeSliceState(uuidA, 2)
	m := newManager(t, h)
	long := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`
	claim := newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(long, "gpu"))
	plan, err := m.Plan(ctx, claim, lookup)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range h.Calls() {
		if strings.HasPrefix(c, "Set") || strings.HasPrefix(c, "Start") {
			t.Errorf("Plan changed the host: %s", c)
		}
	}
	if _, err := m.Prepare(ctx, claim, lookup); err != nil {
		t.Fatal(err)
	}
	// A crash: the record of Prepare is lost, the plan survives; a new manager resets.
	m2 := newManager(t, h)
	if err := m2.Undo(ctx, m2.ResetPlan(plan)); err != nil {
		t.Fatal(err)
	}
	if got := h.State().TimeSlices[uuidA]; got != 2 {
		t.Errorf("time slice after the reset = %d, want the operator's 2", got)
	}
}

// TestJoinedStepIsACopy: the host-change step a share copies from the claim that holds a GPU's
// setting (here the MPS daemon) is its own: changing it through the joining share's record
// changes neither the holder's record nor what the next share of the GPU gets.
func TestJoinedStepIsACopy(t *testing.T) {
	ctx := ctxFor(t)
	m := newManager(t, newHost())
	var recs []*sharing.Record
	for _, name := range []string{uidA, uidB, uidC} {
		if name == uidC {
			// A caller changes the step b copied from a, in place.
			stepOf(t, recs[1], sharing.ActionStartMPSDaemon).Daemon.PipeDir = "/changed"
		}
		rec, err := m.Prepare(ctx, newClaim(name, results(withMemory(shared(result("gpu", "gpu-0"), "s-"+name), "8Gi"))), lookup)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	for i, name := range []string{uidA, uidC} {
		if got := stepOf(t, recs[i*2], sharing.ActionStartMPSDaemon).Daemon.PipeDir; got == "/changed" {
			t.Errorf("claim %s's MPS daemon step changed through another claim's record: pipe directory %q", name, got)
		}
	}
}

// daemonStep returns the MPS daemon step of rec.
// stepOf returns rec's (first) step of action.
func stepOf(t *testing.T, rec *sharing.Record, action sharing.StepAction) *sharing.Step {
	t.Helper()
	for i := range rec.Steps {
		if rec.Steps[i].Action == action {
			return &rec.Steps[i]
		}
	}
	t.Fatalf("claim %s: no %s step in %+v", rec.Name, action, rec.Steps)
	return nil
}

// TestRestoredRecordsAreCopies: records given to Restore and Sync are copied: a caller changing
// them afterwards changes nothing a later share of the GPU joins (the GPU's compute mode step).
func TestRestoredRecordsAreCopies(t *testing.T) {
	ctx := ctxFor(t)
	for _, restore := range []string{"Restore", "Sync"} {
		t.Run(restore, func(t *testing.T) {
			h := newHost()
			h.SetComputeModeState(uuidA, sharing.ComputeModeExclusiveProcess)
			m := newManager(t, h)
			a, err := m.Prepare(ctx, newClaim(uidA, results(withMemory(shared(result("gpu", "gpu-0"), "s-a"), "8Gi"))), lookup)
			if err != nil {
				t.Fatal(err)
			}
			want := *stepOf(t, a, sharing.ActionSetComputeMode).PreviousComputeMode
			records := []sharing.Record{*a}
			if restore == "Restore" {
				err = m.Restore(records)
			} else {
				err = m.Sync(records, []string{a.Devices[0].UUID})
			}
			if err != nil {
				t.Fatal(err)
			}
			*stepOf(t, &records[0], sharing.ActionSetComputeMode).PreviousComputeMode = sharing.ComputeModeProhibited
			b, err := m.Prepare(ctx, newClaim(uidB, results(withMemory(shared(result("gpu", "gpu-0"), "s-b"), "8Gi"))), lookup)
			if err != nil {
				t.Fatal(err)
			}
			if got := *stepOf(t, b, sharing.ActionSetComputeMode).PreviousComputeMode; got != want {
				t.Errorf("the share joined a compute mode step restoring %s, want %s: the registry kept the caller's record", got, want)
			}
		})
	}
}

// TestClaimUIDMustBeAUUID: the claim UID names the claim's own MPS daemon and its directory
// under the MPS root, so Prepare and Plan refuse one that is not a canonical UUID before they
// read or change anything on the host.
func TestClaimUIDMustBeAUUID(t *testing.T) {
	ctx := ctxFor(t)
	calls := map[string]func(*sharing.Manager, *resourceapi.ResourceClaim) error{
		"Prepare": func(m *sharing.Manager, c *resourceapi.ResourceClaim) error {
			_, err := m.Prepare(ctx, c, lookup)
			return err
		},
		"Plan": func(m *sharing.Manager, c *resourceapi.ResourceClaim) error {
			_, err := m.Plan(ctx, c, lookup)
			return err
		},
	}
	for _, uid := range []string{
		"",
		"../../x",
		"../" + uidA,
		"a/b",
		uidA + "/..",
		"..",
		"123E4567-E89B-12D3-A456-426614174000", // upper case
		"{" + uidA + "}",
	} {
		for name, call := range calls {
			t.Run(name+" "+uid, func(t *testing.T) {
				h := newHost()
				before := h.State()
				m := newManager(t, h)
				err := call(m, newClaim(uid, results(result("gpu", "gpu-0")), claimCfg(mpsGPU, "gpu")))
				if err == nil || !strings.Contains(err.Error(), "metadata.uid") || !strings.Contains(err.Error(), "canonical lower-case UUID") {
					t.Fatalf("%s with claim UID %q = %v, want an error naming metadata.uid and what it must be", name, uid, err)
				}
				if got := h.Calls(); len(got) != 0 {
					t.Errorf("%s with a bad claim UID called the host: %v", name, got)
				}
				if diff := cmp.Diff(before, h.State()); diff != "" {
					t.Errorf("host state (-before +after):\n%s", diff)
				}
				if got := m.Registry().List(); len(got) != 0 {
					t.Errorf("registry = %+v, want empty", got)
				}
			})
		}
	}
}
