package sharing_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/sharing"
)

// TestShmTmpfsSize (defect 13): every MPS daemon's shm directory is a tmpfs of the manager's
// size, 1 GiB unless WithMPSShmSize says otherwise.
func TestShmTmpfsSize(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []sharing.Option
		want int64
	}{
		{name: "default", want: 1 << 30},
		{name: "WithMPSShmSize", opts: []sharing.Option{sharing.WithMPSShmSize(256 << 20)}, want: 256 << 20},
		{name: "non-positive keeps the default", opts: []sharing.Option{sharing.WithMPSShmSize(-1)}, want: 1 << 30},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxFor(t)
			h := newHost()
			m := sharing.NewManager("gpu.nvidia.com", append([]sharing.Option{sharing.WithComputeModeSetter(h), sharing.WithMPSDaemons(h),
				sharing.WithMPSRoot("/mps")}, tt.opts...)...)
			rec, err := m.Prepare(ctx, newClaim(uidU1, results(result("gpu", "gpu-0")), claimCfg(mpsGPU, "gpu")), lookup)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]int64{"/mps/" + uidU1 + "/shm": tt.want}, h.State().Mounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			if err := m.Undo(ctx, rec); err != nil {
				t.Fatal(err)
			}
			if got := h.State().Mounts; len(got) != 0 {
				t.Errorf("mounts after Undo = %v, want none", got)
			}
		})
	}
}

// TestSuperviseMPSDaemons (defect 13): daemons of prepared claims that died (with the plugin's
// container) are restarted, each once (the two shares of gpu-0 have a daemon each), with the spec they were started with; a daemon that
// only a failed Prepare's partial record holds is not; one whose state is unknown is left.
func TestSuperviseMPSDaemons(t *testing.T) {
	ctx := ctxFor(t)
	h := newHost()
	m := newManager(t, h)
	own, err := m.Prepare(ctx, newClaim(uidOwn, results(result("gpu", "gpu-1")), claimCfg(mpsGPU, "gpu")), lookup)
	if err != nil {
		t.Fatal(err)
	}
	var sharedRecs []*sharing.Record
	for _, uid := range []string{uidA, uidB} {
		rec, err := m.Prepare(ctx, newClaim(uid, results(withMemory(shared(result("gpu", "gpu-0"), uid), "1Gi"))), lookup)
		if err != nil {
			t.Fatal(err)
		}
		sharedRecs = append(sharedRecs, rec)
	}
	shareA, shareB := sharedRecs[0].Devices[0].MPSDaemonID, sharedRecs[1].Devices[0].MPSDaemonID
	h.FailOn("Ready "+uidMig, errors.New("daemon crashed"))
	h.FailOn("Stop "+uidMig, errors.New("quit refused"))
	if partial, _ := m.Prepare(ctx, newClaim(uidMig, results(result("mig", "gpu-2-mig-1g5gb-0")), claimCfg(mpsMIG, "mig")), lookup); partial == nil {
		t.Fatal("test setup: want a partial record for claim mig")
	}
	h.FailOn("Ready "+uidMig, nil)
	h.FailOn("Stop "+uidMig, nil)
	want := h.State().Daemons

	// Nothing died: nothing to do.
	if got, err := m.SuperviseMPSDaemons(ctx); err != nil || len(got) != 0 {
		t.Fatalf("SuperviseMPSDaemons with every daemon alive = %v, %v; want nothing", got, err)
	}
	for _, id := range []string{uidOwn, shareA, shareB, uidMig} {
		h.KillDaemon(id)
	}
	h.ResetCalls()
	got, err := m.SuperviseMPSDaemons(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantRestarted := []string{uidOwn, shareA, shareB}
	slices.Sort(wantRestarted)
	if diff := cmp.Diff(wantRestarted, got); diff != "" {
		t.Errorf("restarted (-want +got):\n%s", diff)
	}
	delete(want, uidMig)
	if diff := cmp.Diff(want, h.State().Daemons); diff != "" {
		t.Errorf("daemons after supervision (-want +got):\n%s", diff)
	}
	for _, id := range []string{shareA, shareB} {
		if n := strings.Count(strings.Join(h.Calls(), "\n"), "Start "+id); n != 1 {
			t.Errorf("the daemon of a share of gpu-0 started %d times, want once: %v", n, h.Calls())
		}
	}

	// A daemon whose state cannot be read is not restarted.
	h.KillDaemon(uidOwn)
	h.FailOn("Running "+uidOwn, errors.New("permission denied"))
	got, err = m.SuperviseMPSDaemons(ctx)
	if err == nil || !strings.Contains(err.Error(), "MPS control daemon "+uidOwn) || !strings.Contains(err.Error(), "permission denied") || len(got) != 0 {
		t.Errorf("SuperviseMPSDaemons with an unreadable daemon = %v, %v; want an error naming it and no restart", got, err)
	}
	if err := m.Undo(ctx, own); err != nil {
		t.Fatal(err)
	}
}

// mkDaemonDir creates a daemon directory as MPSControl.Start does, with a file in each part.
func mkDaemonDir(t *testing.T, root, id string) {
	t.Helper()
	for _, d := range []string{"pipe", "log", "shm"} {
		p := filepath.Join(root, id, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestCleanMPSDirs (defect 13): directories of daemons that belong to no registered claim are
// removed with their tmpfs; those of registered claims (prepared or partial), of a Prepare in
// progress, and of orphan daemons that still run are never touched.
func TestCleanMPSDirs(t *testing.T) {
	ctx := ctxFor(t)
	root := t.TempDir()
	h := newHost()
	m := sharing.NewManager("gpu.nvidia.com", sharing.WithComputeModeSetter(h), sharing.WithMPSDaemons(h), sharing.WithMPSRoot(root))

	// Registered: a prepared claim and a failed one's partial record.
	if _, err := m.Prepare(ctx, newClaim(uidKept, results(result("gpu", "gpu-0")), claimCfg(mpsGPU, "gpu")), lookup); err != nil {
		t.Fatal(err)
	}
	h.FailOn("Ready "+uidPartial, errors.New("daemon crashed"))
	h.FailOn("Stop "+uidPartial, errors.New("quit refused"))
	if partial, _ := m.Prepare(ctx, newClaim(uidPartial, results(result("gpu", "gpu-1")), claimCfg(mpsGPU, "gpu")), lookup); partial == nil {
		t.Fatal("test setup: want a partial record")
	}
	h.FailOn("Stop "+uidPartial, nil)
	// Registered in an older form: a device names its daemon, no step does.
	restored := append(m.Registry().List(), sharing.Record{Version: sharing.RecordVersion, ClaimUID: "old", Namespace: "ns", Name: "old",
		Devices: []sharing.PreparedDevice{{Request: "gpu", Pool: "node-1", Device: "gpu-2", UUID: uuidC, Strategy: "MPS", MPSDaemonID: "devonly"}}})
	if err := m.Restore(restored); err != nil {
		t.Fatal(err)
	}
	// The registered daemons died with the plugin's container: their directories stay anyway.
	h.KillDaemon(uidKept)
	h.KillDaemon(uidPartial)
	// Forgotten at a reboot: one dead, with its tmpfs still mounted; one whose daemon runs.
	for _, id := range []string{uidKept, uidPartial, "devonly", "forgotten", "orphan-running"} {
		mkDaemonDir(t, root, id)
	}
	if err := h.Mount(ctx, filepath.Join(root, "forgotten", "shm"), 1<<30); err != nil {
		t.Fatal(err)
	}
	h.SetComputeModeState(uuidC, sharing.ComputeModeExclusiveProcess)
	if err := h.Start(ctx, sharing.MPSDaemonSpec{ID: "orphan-running", DeviceUUIDs: []string{uuidC}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "not-a-daemon"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// A Prepare in progress: its daemon directory exists before the claim is registered.
	var wg sync.WaitGroup
	entered, release := make(chan struct{}), make(chan struct{})
	h.SetHook(func(call string) error {
		if call == "Start "+uidInflight {
			mkDaemonDir(t, root, uidInflight)
			close(entered)
			<-release
		}
		return nil
	})
	wg.Go(func() {
		if _, err := m.Prepare(ctx, newClaim(uidInflight, results(result("gpu", "gpu-3")), claimCfg(mpsGPU, "gpu")), lookup); err != nil {
			t.Errorf("Prepare in progress: %v", err)
		}
	})
	<-entered
	got, err := m.CleanMPSDirs(ctx)
	close(release)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sharing.MPSCleanup{Removed: []string{"forgotten"}, Running: []string{"orphan-running"}}, got); diff != "" {
		t.Errorf("CleanMPSDirs (-want +got):\n%s", diff)
	}
	for id, want := range map[string]bool{uidKept: true, uidPartial: true, "devonly": true, uidInflight: true, "orphan-running": true, "forgotten": false} {
		if got := exists(filepath.Join(root, id, "shm", "f")); got != want {
			t.Errorf("directory of %s exists = %v, want %v", id, got, want)
		}
	}
	if _, ok := h.State().Mounts[filepath.Join(root, "forgotten", "shm")]; ok {
		t.Error("tmpfs of the forgotten daemon still mounted")
	}
	if !exists(filepath.Join(root, "not-a-daemon")) {
		t.Error("a file in the MPS root was removed")
	}
	// A second run finds nothing more to do.
	if got, err := m.CleanMPSDirs(ctx); err != nil || len(got.Removed) != 0 {
		t.Errorf("second CleanMPSDirs = %+v, %v; want nothing removed", got, err)
	}
}
