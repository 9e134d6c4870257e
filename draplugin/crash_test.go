package draplugin_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/sharing"
)

type crashKind struct {
	name  string
	claim func(e *env) *resourceapi.ResourceClaim
	// plain: prepare and unprepare create nothing and change no host setting, so neither is
	// recorded before its side effect (the CDI spec written or removed) and there is nothing
	// to roll back.
	plain bool
}

var crashKinds = []crashKind{
	{"exclusive", func(e *env) *resourceapi.ResourceClaim {
		return e.claim(gpudra.GPUDeviceClassName, gpuIndex(0), "")
	}, true},
	{"time-slicing", func(e *env) *resourceapi.ResourceClaim {
		return e.claim(gpudra.GPUDeviceClassName, gpuIndex(1), timeSlicingConfig)
	}, false},
	{"mps", func(e *env) *resourceapi.ResourceClaim {
		return e.claim(gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig)
	}, false},
	{"dynamic-mig", func(e *env) *resourceapi.ResourceClaim {
		return e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 3), "")
	}, false},
}

// bystanders are prepared claims that every crash must leave prepared: a dynamic MIG device and
// a time-sliced GPU.
func bystanders(e *env) []*resourceapi.ResourceClaim {
	return []*resourceapi.ResourceClaim{
		e.claim(gpudra.MIGDeviceClassName, migProfileOn("2g.10gb", 7), ""),
		e.claim(gpudra.GPUDeviceClassName, gpuIndex(6), timeSlicingConfig),
	}
}

// stepsOf records the steps of a prepare and an unprepare of one claim of the kind.
func stepsOf(t *testing.T, k crashKind) (prepare, unprepare []testhooks.CrashPoint) {
	e := newEnv(t, "dgx-a100-40gb", true)
	c := k.claim(e)
	rec := draplugintest.CrashAt(c.UID, -1)
	p := e.plugin(withHooks(rec.Hooks()))
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	prepare = rec.Seen()
	rec.Reset()
	if err := unprepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	return prepare, rec.Seen()
}

// TestCrashMatrix stops the plugin after every step of prepare and of unprepare, for exclusive,
// time-slicing, MPS and dynamic MIG claims, with two other claims prepared on the node. A new
// plugin on the same machine, host and directories then reconciles. Afterwards no MIG instance,
// CDI spec or host setting may be left over, no prepared claim may be lost, a half-done prepare
// must be rolled back and succeed when retried, and a half-done unprepare must be finished.
func TestCrashMatrix(t *testing.T) {
	total, passed := 0, 0
	for _, k := range crashKinds {
		prepSteps, unprepSteps := stepsOf(t, k)
		t.Logf("%s: prepare steps %v, unprepare steps %v", k.name, prepSteps, unprepSteps)
		for i := range prepSteps {
			total++
			name := fmt.Sprintf("%s/prepare/%d-%s", k.name, i+1, prepSteps[i])
			if t.Run(name, func(t *testing.T) { crashDuringPrepare(t, k, i+1, i == len(prepSteps)-1) }) {
				passed++
			}
		}
		for i := range unprepSteps {
			total++
			name := fmt.Sprintf("%s/unprepare/%d-%s", k.name, i+1, unprepSteps[i])
			if t.Run(name, func(t *testing.T) { crashDuringUnprepare(t, k, i+1, i == len(unprepSteps)-1) }) {
				passed++
			}
		}
	}
	t.Logf("crash matrix: %d kinds × every prepare and unprepare step = %d crash points, %d recovered cleanly, %d failed", len(crashKinds), total, passed, total-passed)
}

func crashDuringPrepare(t *testing.T, k crashKind, n int, last bool) {
	e := newEnv(t, "dgx-a100-40gb", true)
	others := bystanders(e)
	c := k.claim(e)
	p1 := e.plugin(withHooks(draplugintest.CrashAt(c.UID, n).Hooks()))
	e.reconcile(p1)
	want := prepareAll(t, p1, others...)
	if _, err := prepareOne(t, p1, c); !errors.Is(err, draplugintest.ErrCrash) {
		t.Fatalf("prepare with crash at step %d: %v", n, err)
	}

	p2 := e.plugin()
	rep := e.reconcile(p2)
	checkPrepared(t, e, p2, want, others)
	if last {
		if !slices.Contains(e.specs(), string(c.UID)) || rep.Prepared != 3 {
			t.Errorf("claim completed before the crash is not prepared: specs %v, report %v", e.specs(), rep)
		}
	} else {
		// A claim whose prepare creates nothing and changes no host setting is not recorded
		// before its spec is written: nothing to roll back, and its spec is removed.
		wantRolledBack := map[bool]int{true: 0, false: 1}[k.plain]
		if slices.Contains(e.specs(), string(c.UID)) || len(rep.RolledBack) != wantRolledBack {
			t.Errorf("half-done prepare not rolled back: specs %v, report %v", e.specs(), rep)
		}
		if got, want := e.MIGInstances(), bystanderInstances(t, others); !cmp.Equal(got, want) {
			t.Errorf("MIG instances after rollback = %v, want only the bystander's %v", got, want)
		}
		checkHostOnlyBystander(t, e)
	}
	// The (retried) prepare succeeds; then everything unprepares cleanly.
	if _, err := prepareOne(t, p2, c); err != nil {
		t.Fatalf("retried prepare: %v", err)
	}
	unprepareAll(t, e, p2, append(others, c)...)
}

func crashDuringUnprepare(t *testing.T, k crashKind, n int, last bool) {
	e := newEnv(t, "dgx-a100-40gb", true)
	others := bystanders(e)
	c := k.claim(e)
	crash := draplugintest.CrashAt(c.UID, n)
	crash.Arm(false)
	p1 := e.plugin(withHooks(crash.Hooks()))
	e.reconcile(p1)
	want := prepareAll(t, p1, others...)
	if _, err := prepareOne(t, p1, c); err != nil {
		t.Fatal(err)
	}
	crash.Arm(true)
	if err := unprepareOne(t, p1, c); !errors.Is(err, draplugintest.ErrCrash) {
		t.Fatalf("unprepare with crash at step %d: %v", n, err)
	}

	p2 := e.plugin()
	rep := e.reconcile(p2)
	checkPrepared(t, e, p2, want, others)
	if k.plain && !last {
		// A plain unprepare records no intent: the claim is still prepared, with its spec
		// written again, until kubelet retries the unprepare it got no answer for.
		if !slices.Contains(e.specs(), string(c.UID)) || rep.Prepared != 3 {
			t.Errorf("claim whose plain unprepare crashed is not prepared: specs %v, report %v", e.specs(), rep)
		}
	} else if slices.Contains(e.specs(), string(c.UID)) || rep.Prepared != 2 {
		t.Errorf("half-done unprepare not finished: specs %v, report %v", e.specs(), rep)
	}
	if got, want := e.MIGInstances(), bystanderInstances(t, others); !cmp.Equal(got, want) {
		t.Errorf("MIG instances = %v, want only the bystander's %v", got, want)
	}
	checkHostOnlyBystander(t, e)
	// kubelet retries the unprepare: it succeeds.
	if err := unprepareOne(t, p2, c); err != nil {
		t.Errorf("repeated unprepare: %v", err)
	}
	unprepareAll(t, e, p2, others...)
}

func prepareAll(t *testing.T, p *draplugin.Plugin, cs ...*resourceapi.ResourceClaim) map[types.UID]string {
	t.Helper()
	out := map[types.UID]string{}
	for _, c := range cs {
		devs, err := prepareOne(t, p, c)
		if err != nil {
			t.Fatal(err)
		}
		out[c.UID] = fmt.Sprint(devs)
	}
	return out
}

// checkPrepared checks that the claims are still prepared after a restart: same answer, spec
// present, and no MIG instance created by the repeated prepare.
func checkPrepared(t *testing.T, e *env, p *draplugin.Plugin, want map[types.UID]string, cs []*resourceapi.ResourceClaim) {
	t.Helper()
	creates := e.Machine.Calls("CreateGpuInstanceWithPlacement")
	for _, c := range cs {
		devs, err := prepareOne(t, p, c)
		if err != nil || fmt.Sprint(devs) != want[c.UID] {
			t.Errorf("claim %s lost: %v, %v (want %v)", c.Name, devs, err, want[c.UID])
		}
		if !slices.Contains(e.specs(), string(c.UID)) {
			t.Errorf("claim %s lost its CDI spec", c.Name)
		}
	}
	if got := e.Machine.Calls("CreateGpuInstanceWithPlacement"); got != creates {
		t.Errorf("prepared claims were prepared again (%d MIG creations)", got-creates)
	}
}

// checkHostOnlyBystander checks that only the time-slicing bystander on GPU 6 changed the host.
func checkHostOnlyBystander(t *testing.T, e *env) {
	t.Helper()
	st := e.Host.State()
	for u, m := range st.ComputeModes {
		if m != sharing.ComputeModeDefault {
			t.Errorf("device %s left in compute mode %s", u, m)
		}
	}
	for u, v := range st.TimeSlices {
		if want := map[bool]int{true: 3, false: 0}[u == e.Inventory.GPUs[6].UUID]; v != want {
			t.Errorf("GPU %s time slice %d, want %d", u, v, want)
		}
	}
	if len(st.Daemons) != 0 {
		t.Errorf("MPS daemons left: %v", st.Daemons)
	}
}

func unprepareAll(t *testing.T, e *env, p *draplugin.Plugin, cs ...*resourceapi.ResourceClaim) {
	t.Helper()
	for _, c := range cs {
		if err := unprepareOne(t, p, c); err != nil {
			t.Errorf("unprepare %s: %v", c.Name, err)
		}
	}
	if got := e.specs(); len(got) != 0 {
		t.Errorf("specs left: %v", got)
	}
	if got := e.MIGInstances(); len(got) != 0 {
		t.Errorf("MIG instances left: %v", got)
	}
	if err := e.HostClean(); err != nil {
		t.Error(err)
	}
}

// sharedTimeSlicingConfig time-slices a GPU that several claims share.
const sharedTimeSlicingConfig = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`

// bystanderInstances is the MIG instance of the dynamic MIG bystander, as pluginEnv.instances
// names it.
func bystanderInstances(t *testing.T, others []*resourceapi.ResourceClaim) []string {
	t.Helper()
	mn, err := gpudra.ParseMIGDeviceName(others[0].Status.Allocation.Devices.Results[0].Device)
	if err != nil {
		t.Fatal(err)
	}
	return []string{fmt.Sprintf("%d:2g.10gb@%d", mn.ParentMinor, mn.PlacementStart)}
}

// TestJoiningShareRecordsNoIntent: two claims time-slice shares of GPU 4 (its compute mode and
// time slice are the same for both). The first to prepare makes the host changes and records
// its intent first; the second only joins them and records none. (Shares under MPS start a
// daemon each, so each records its intent.) Whichever unprepares first leaves the settings to the other and
// records no intent; the last one restores them and records UnprepareStarted first. The crash
// safety of both paths is TestRealCrash's (scenario static-and-shared) and TestPowerLoss's.
func TestJoiningShareRecordsNoIntent(t *testing.T) {
	for _, firstOut := range []int{0, 1} {
		t.Run(fmt.Sprintf("claim-%d-unprepares-first", firstOut), func(t *testing.T) {
			e := newEnv(t, "dgx-a100-40gb", false)
			var cs []*resourceapi.ResourceClaim
			for _, name := range []string{"shared-a", "shared-b"} {
				c := draplugintest.Claim(name, gpudra.GPUDeviceClassName, gpuIndex(4), sharedTimeSlicingConfig)
				shareDevice(c, e.Node, 4)
				cs = append(cs, c)
			}
			intents := map[string]bool{} // "prepare a", "unprepare b", ... → an intent was on disk
			hooks := testhooks.Hooks{AfterStep: func(point testhooks.CrashPoint, uid types.UID) error {
				name := map[types.UID]string{cs[0].UID: "a", cs[1].UID: "b"}[uid]
				switch point {
				case testhooks.CrashAfterPrepareStarted:
					b, err := os.ReadFile(filepath.Join(e.StateDir, "checkpoint.json"))
					intents["prepare "+name] = err == nil && strings.Contains(string(b), string(uid))
				case testhooks.CrashAfterUnprepareStarted:
					intents["unprepare "+name] = true
				}
				return nil
			}}
			p := e.plugin(withHooks(hooks))
			e.reconcile(p)
			prepareAll(t, p, cs...)
			for _, i := range []int{firstOut, 1 - firstOut} {
				if err := unprepareOne(t, p, cs[i]); err != nil {
					t.Fatal(err)
				}
			}
			last := map[int]string{0: "b", 1: "a"}[firstOut]
			want := map[string]bool{"prepare a": true, "prepare b": false, "unprepare " + last: true}
			if diff := cmp.Diff(want, intents); diff != "" {
				t.Errorf("intents recorded (-want +got):\n%s", diff)
			}
			if err := e.HostClean(); err != nil {
				t.Errorf("host after both unprepares: %v", err)
			}
		})
	}
}

// TestPlainUnprepareRecordsNoIntent: unpreparing a claim that created nothing and changed no
// host setting writes the checkpoint once (the entry's deletion), with no UnprepareStarted
// record before it; a claim with host changes records its intent first.
func TestPlainUnprepareRecordsNoIntent(t *testing.T) {
	for _, k := range crashKinds {
		t.Run(k.name, func(t *testing.T) {
			_, unprepare := stepsOf(t, k)
			recorded := slices.Contains(unprepare, testhooks.CrashAfterUnprepareStarted)
			if recorded == k.plain {
				t.Errorf("unprepare steps %v: UnprepareStarted recorded = %v, want %v", unprepare, recorded, !k.plain)
			}
		})
	}
}
