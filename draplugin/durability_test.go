package draplugin_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
)

// syncWatch counts the plugin's fsyncs (TestHooks.Synced) and keeps what a power loss could leave
// of the checkpoint: its content at the last sync of the state directory and every version
// written since (a power loss keeps one of them, or tears it).
type syncWatch struct {
	stateDir string

	mu       sync.Mutex
	n        int
	versions [][]byte // versions[0] is the durable one
}

func newSyncWatch(stateDir string) *syncWatch {
	w := &syncWatch{stateDir: stateDir}
	w.versions = [][]byte{w.read()}
	return w
}

func (w *syncWatch) read() []byte {
	b, _ := os.ReadFile(filepath.Join(w.stateDir, "checkpoint.json"))
	return b
}

// synced is TestHooks.Synced.
func (w *syncWatch) synced(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	if filepath.Clean(path) == filepath.Clean(w.stateDir) {
		w.versions = [][]byte{w.read()}
	}
}

// snapshot records the checkpoint as it is now, when it changed.
func (w *syncWatch) snapshot() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b := w.read(); !bytes.Equal(b, w.versions[len(w.versions)-1]) {
		w.versions = append(w.versions, b)
	}
}

// afterStep is TestHooks.AfterStep: every crash point follows a checkpoint write or a side effect.
func (w *syncWatch) afterStep(testhooks.CrashPoint, types.UID) error {
	w.snapshot()
	return nil
}

func (w *syncWatch) hooks() testhooks.Hooks {
	return testhooks.Hooks{Synced: w.synced, AfterStep: w.afterStep}
}

// take returns the number of fsyncs since the last take.
func (w *syncWatch) take() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.n
	w.n = 0
	return n
}

// survivors returns what a power loss may leave of the checkpoint: each version since the last
// sync, and torn ones (empty, or cut in half: the directory sync does not sync the content).
func (w *syncWatch) survivors() map[string][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]byte{}
	for i, v := range w.versions {
		name := fmt.Sprintf("version-%d-after-the-last-sync", i)
		if i == 0 {
			name = "the-last-synced-version"
		}
		out[name] = v
	}
	last := w.versions[len(w.versions)-1]
	out["torn-empty"] = []byte{}
	out["torn-half-of-the-latest"] = last[:len(last)/2]
	out["torn-half-of-the-synced"] = w.versions[0][:len(w.versions[0])/2]
	return out
}

// TestFsyncsPerOperation counts the fsyncs of prepare and unprepare calls, one claim at a time
// and many in one call, for every kind of claim. The design (docs/reliability.md, "Durability")
// says what they may cost: none. Every write survives a process crash only; a power loss reboots
// the node, which undoes what prepares did, and reconciliation then forgets every claim of the
// earlier boot, whatever version of the checkpoint survived (TestPowerLoss).
func TestFsyncsPerOperation(t *testing.T) {
	for _, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			e := sc.env(t)
			claims, err := sc.claims(e.Node)
			if err != nil {
				t.Fatal(err)
			}
			w := newSyncWatch(e.StateDir)
			p := e.plugin(withHooks(w.hooks()))
			e.reconcile(p)
			w.take()
			ctx := context.Background()
			for _, c := range claims {
				for _, step := range []struct {
					what string
					do   func() error
					want int
				}{
					{"prepare", func() error { _, err := prepareOne(t, p, c); return err }, 0},
					{"repeated prepare", func() error { _, err := prepareOne(t, p, c); return err }, 0},
					{"unprepare", func() error { return unprepareOne(t, p, c) }, 0},
					{"repeated unprepare", func() error { return unprepareOne(t, p, c) }, 0},
				} {
					if err := step.do(); err != nil {
						t.Fatalf("%s %s: %v", step.what, c.Name, err)
					}
					if got := w.take(); got != step.want {
						t.Errorf("%s of %s made %d fsyncs, want %d", step.what, c.Name, got, step.want)
					}
				}
			}
			res, _ := p.PrepareResourceClaims(ctx, claims)
			for uid, r := range res {
				if r.Err != nil {
					t.Fatalf("concurrent prepare of %s: %v", uid, r.Err)
				}
			}
			if got := w.take(); got != 0 {
				t.Errorf("%d concurrent prepares made %d fsyncs, want 0", len(claims), got)
			}
			if _, err := p.UnprepareResourceClaims(ctx, refs(claims)); err != nil {
				t.Fatal(err)
			}
			if got := w.take(); got != 0 {
				t.Errorf("%d unprepares in one call made %d fsyncs, want 0", len(claims), got)
			}
		})
	}
}

func refs(cs []*resourceapi.ResourceClaim) []kubeletplugin.NamespacedObject {
	out := make([]kubeletplugin.NamespacedObject, 0, len(cs))
	for _, c := range cs {
		out = append(out, kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID})
	}
	return out
}

// TestPowerLoss: kubelet prepares claims of every kind, unprepares some and prepares more; then
// the power fails. After the reboot the checkpoint holds whatever a power loss may leave of it
// (the version of the last sync, any later one, or a torn one) and the CDI directory, a tmpfs,
// is empty. The plugin starts, kubelet prepares again the claims it considers prepared (as it
// does for every pod it restarts): each must be prepared completely — its spec there and
// granting the MIG instance that exists — and nothing else may be on the node: no spec, entry,
// instance or host setting of a claim kubelet considers unprepared. Kubelet's unprepares then
// leave the node empty. Also with the CDI directory on a disk: its specs survive, torn.
func TestPowerLoss(t *testing.T) {
	for _, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			e := sc.env(t)
			claims, err := sc.claims(e.Node)
			if err != nil {
				t.Fatal(err)
			}
			w := newSyncWatch(e.StateDir)
			p := e.plugin(withHooks(w.hooks()))
			e.reconcile(p)
			prepared := kubeletScript(t, p, w, claims)
			specs := readSpecs(t, e)
			survivors := w.survivors()
			for _, name := range slices.Sorted(maps.Keys(survivors)) {
				t.Run("checkpoint-"+name, func(t *testing.T) {
					afterPowerLoss(t, sc, claims, prepared, survivors[name], nil)
				})
			}
			// With the CDI directory on a disk, the specs as they were (their removals and
			// writes were not synced either) or torn.
			t.Run("cdi-on-disk-torn", func(t *testing.T) {
				torn := map[string][]byte{}
				for name := range specs {
					torn[name] = nil
				}
				afterPowerLoss(t, sc, claims, prepared, w.versions[len(w.versions)-1], torn)
			})
			t.Run("cdi-on-disk-intact", func(t *testing.T) {
				afterPowerLoss(t, sc, claims, prepared, survivors["the-last-synced-version"], specs)
			})
		})
	}
}

// kubeletScript prepares the first half of the claims at once, unprepares the first quarter,
// prepares the second half, and returns what kubelet then considers prepared.
func kubeletScript(t *testing.T, p *draplugin.Plugin, w *syncWatch, claims []*resourceapi.ResourceClaim) map[types.UID]bool {
	t.Helper()
	ctx := context.Background()
	half := (len(claims) + 1) / 2
	prepared := map[types.UID]bool{}
	prep := func(cs []*resourceapi.ResourceClaim) {
		res, _ := p.PrepareResourceClaims(ctx, cs)
		for _, c := range cs {
			if err := res[c.UID].Err; err != nil {
				t.Fatalf("prepare %s: %v", c.Name, err)
			}
			prepared[c.UID] = true
		}
		w.snapshot()
	}
	prep(claims[:half])
	res, _ := p.UnprepareResourceClaims(ctx, refs(claims[:half/2]))
	for _, c := range claims[:half/2] {
		if err := res[c.UID]; err != nil {
			t.Fatalf("unprepare %s: %v", c.Name, err)
		}
		delete(prepared, c.UID)
	}
	w.snapshot()
	prep(claims[half:])
	return prepared
}

// readSpecs returns the node's CDI spec files by name.
func readSpecs(t *testing.T, e *env) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(e.CDIDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, de := range entries {
		b, err := os.ReadFile(filepath.Join(e.CDIDir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[de.Name()] = b
	}
	return out
}

// writeSpecs puts specs, by file name, into the node's CDI directory.
func writeSpecs(t *testing.T, e *env, specs map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(e.CDIDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range specs {
		if err := os.WriteFile(filepath.Join(e.CDIDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// afterPowerLoss boots the node again with checkpoint as the state directory's checkpoint and
// specs (nil: none, a tmpfs) in the CDI directory, and plays kubelet.
func afterPowerLoss(t *testing.T, sc crashScenario, claims []*resourceapi.ResourceClaim, kubelet map[types.UID]bool, checkpoint []byte, specs map[string][]byte) {
	prepared := maps.Clone(kubelet)
	e := sc.env(t) // a new boot: fresh machine and host, new boot ID
	if err := os.MkdirAll(e.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.StateDir, "checkpoint.json"), checkpoint, 0o600); err != nil {
		t.Fatal(err)
	}
	writeSpecs(t, e, specs)
	p := e.plugin()
	rep := e.reconcile(p)
	t.Logf("after the power loss: %v", rep)
	var again []*resourceapi.ResourceClaim
	for _, c := range claims {
		if prepared[c.UID] {
			again = append(again, c)
		}
	}
	res, _ := p.PrepareResourceClaims(context.Background(), again)
	for _, c := range again {
		if err := res[c.UID].Err; err != nil {
			t.Errorf("kubelet's prepare of %s after the power loss: %v", c.Name, err)
			checkAbsent(t, e, c)
			delete(prepared, c.UID)
			continue
		}
		checkComplete(t, e, c, res[c.UID].Devices)
	}
	checkOnlyPrepared(t, e, sc.dynamic, claims, prepared)
	if _, err := p.UnprepareResourceClaims(context.Background(), refs(again)); err != nil {
		t.Fatal(err)
	}
	checkOnlyPrepared(t, e, sc.dynamic, claims, nil)
	if err := e.HostClean(); err != nil {
		t.Errorf("host after every claim was unprepared: %v", err)
	}
}

// checkComplete checks that a prepared claim's CDI devices resolve, as a runtime resolves them,
// and that each MIG device's spec grants the GPU instance the device is on the machine now.
func checkComplete(t *testing.T, e *env, c *resourceapi.ResourceClaim, devs []kubeletplugin.Device) {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(e.CDIDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range devs {
		ids = append(ids, d.CDIDeviceIDs...)
	}
	if unresolved, err := cache.InjectDevices(&oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}, ids...); err != nil || len(ids) == 0 {
		t.Errorf("claim %s: CDI devices %v do not resolve: %v (unresolved %v)", c.Name, ids, err, unresolved)
		return
	}
	spec, err := os.ReadFile(filepath.Join(e.CDIDir, "k8s.gpu.nvidia.com-claim_"+string(c.UID)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), e.Machine)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if _, err := gpudra.ParseMIGDeviceName(r.Device); err != nil {
			continue // a full GPU
		}
		m, g := migDeviceNamed(inv, r.Device)
		if m == nil {
			t.Errorf("claim %s: MIG device %s does not exist on the machine", c.Name, r.Device)
			continue
		}
		gi := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d\"", cditest.GIMinor(g.Minor, m.GIID))
		if !strings.Contains(string(spec), gi) {
			t.Errorf("claim %s: the spec does not grant the GPU instance of %s that exists (%s)", c.Name, r.Device, gi)
		}
	}
}

func migDeviceNamed(inv *gpu.Inventory, name string) (*gpu.MIGDevice, *gpu.GPU) {
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		for j := range g.MIGDevices {
			if gpudra.MIGDeviceNameOf(&g.MIGDevices[j]) == name {
				return &g.MIGDevices[j], g
			}
		}
	}
	return nil, nil
}

// checkAbsent checks that nothing of a claim whose prepare failed is on the node.
func checkAbsent(t *testing.T, e *env, c *resourceapi.ResourceClaim) {
	t.Helper()
	if slices.Contains(e.specs(), string(c.UID)) {
		t.Errorf("claim %s failed to prepare but its spec exists: half-present", c.Name)
	}
}

// checkOnlyPrepared checks that the node holds exactly the claims kubelet considers prepared:
// their specs and no other, a checkpoint a fresh plugin finds them in with nothing to repair,
// and (dynamic MIG) no MIG instance but theirs.
func checkOnlyPrepared(t *testing.T, e *env, dynamic bool, claims []*resourceapi.ResourceClaim, prepared map[types.UID]bool) {
	t.Helper()
	var want []string
	migDevices := 0
	for _, c := range claims {
		if !prepared[c.UID] {
			continue
		}
		want = append(want, string(c.UID))
		for _, r := range c.Status.Allocation.Devices.Results {
			if _, err := gpudra.ParseMIGDeviceName(r.Device); err == nil {
				migDevices++
			}
		}
	}
	slices.Sort(want)
	if got := e.specs(); !cmp.Equal(got, want, cmpEmpty) {
		t.Errorf("CDI specs %v, want those of the claims kubelet considers prepared %v", got, want)
	}
	rep, err := e.plugin().Reconcile(context.Background())
	if err != nil || rep.Prepared != len(want) || len(rep.RolledBack)+len(rep.UnprepareFinished)+len(rep.SpecsPruned)+len(rep.MIGDestroyed)+len(rep.SpecsRewritten)+len(rep.Forgotten) > 0 {
		t.Errorf("a plugin started now finds %v, %v; want %d prepared claims and nothing to repair", rep, err, len(want))
	}
	if dynamic {
		if got := e.MIGInstances(); len(got) != migDevices {
			t.Errorf("MIG instances %v, want %d (one per MIG device of a prepared claim)", got, migDevices)
		}
	}
}

// TestPowerLossAfterUnprepareOfForgottenClaim: reconciliation forgets a claim whose static MIG
// device a reboot removed, without a sync; kubelet's unprepare of it finds nothing, and its
// success must survive a power loss all the same. Otherwise the checkpoint that survives still
// holds the claim, and the boot after, with the MIG layout back, keeps it prepared forever.
func TestPowerLossAfterUnprepareOfForgottenClaim(t *testing.T) {
	layout := gputest.WithMIG(0, "3g.20gb", "3g.20gb")
	e := newEnv(t, "dgx-a100-40gb", false, layout)
	p := e.plugin()
	e.reconcile(p)
	x := e.claim(gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 0", "")
	y := e.claim(gpudra.GPUDeviceClassName, gpuIndex(1), "")
	prepareAll(t, p, x, y)
	if err := unprepareOne(t, p, y); err != nil { // a sync: x is in the synced checkpoint
		t.Fatal(err)
	}
	if err := e.Reboot(gputest.WithMIG(0, "7g.40gb")); err != nil {
		t.Fatal(err)
	}
	w := newSyncWatch(e.StateDir)
	p2 := e.plugin(withHooks(w.hooks()))
	if rep := e.reconcile(p2); !slices.Contains(rep.Forgotten, claimRefOf(x)) {
		t.Fatalf("reconciliation did not forget %s: %v", x.Name, rep.Forgotten)
	}
	if err := unprepareOne(t, p2, x); err != nil {
		t.Fatal(err)
	}
	// The power fails: what was synced last survives.
	if err := os.WriteFile(filepath.Join(e.StateDir, "checkpoint.json"), w.survivors()["the-last-synced-version"], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Reboot(layout); err != nil {
		t.Fatal(err)
	}
	e.reconcile(e.plugin())
	checkOnlyPrepared(t, e, false, []*resourceapi.ResourceClaim{x, y}, nil)
}
