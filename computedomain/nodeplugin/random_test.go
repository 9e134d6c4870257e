package nodeplugin_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// randomCrasher stops the operations of one claim at its n-th crash point, once armed.
type randomCrasher struct {
	mu   sync.Mutex
	uid  types.UID
	left int
}

func (c *randomCrasher) arm(uid types.UID, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uid, c.left = uid, n
}

func (c *randomCrasher) hooks() testhooks.Hooks {
	return testhooks.Hooks{AfterStep: func(_ testhooks.CrashPoint, uid types.UID) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if uid != c.uid || c.left == 0 {
			return nil
		}
		if c.left--; c.left == 0 {
			return testhooks.ErrCrash
		}
		return nil
	}}
}

// slotState is what kubelet knows of the node's channel or daemon device: the claim holding it
// and the domain its config names (nil: free).
type slotState struct {
	claim  *resourceapi.ResourceClaim
	domain types.UID
}

// TestRandomSequences runs random sequences of channel and daemon prepares and unprepares of
// two domains, a third of them stopped at a random crash point (the plugin replaced by a new
// one, kubelet retrying until the call succeeds), and after every operation checks the
// invariant: the CDI specs are exactly those of the claims kubelet holds prepared, the daemon
// directories exactly that of the prepared daemon claim's domain, and a reconciliation finds
// nothing to do.
func TestRandomSequences(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runRandomSequence(t, seed, 24) })
	}
}

func runRandomSequence(t *testing.T, seed uint64, ops int) {
	rnd := rand.New(rand.NewPCG(seed, 0))
	crash := &randomCrasher{}
	e := newEnv(t, envConfig{hooks: crash.hooks()})
	domains := []types.UID{domainUID, otherUID}
	for i, uid := range domains {
		if err := e.client.Create(t.Context(), domain(fmt.Sprintf("d%d", i), uid, e.clique, 0, v1beta1.StatusReady, map[string]string{e.nodeName: v1beta1.StatusReady})); err != nil {
			t.Fatal(err)
		}
	}
	slots := map[string]*slotState{"channel": {}, "daemon": {}}
	var log []string
	for i := range ops {
		name := []string{"channel", "daemon"}[rnd.IntN(2)]
		s := slots[name]
		op := "prepare"
		if s.claim != nil {
			op = "unprepare"
		} else {
			s.domain = domains[rnd.IntN(2)]
			params, sel := channelParams(s.domain, ""), channelSel
			if name == "daemon" {
				params, sel = daemonParams(s.domain), daemonSel
			}
			s.claim = e.allocate(claim(fmt.Sprintf("c%d-%d", seed, i), sel, params))
		}
		crashAt := 0
		if rnd.IntN(3) == 0 {
			crashAt = 1 + rnd.IntN(4)
		}
		log = append(log, fmt.Sprintf("%s %s %s crash@%d", op, name, s.domain, crashAt))
		crash.arm(s.claim.UID, crashAt)
		err := call(e, op, s.claim)
		for errors.Is(err, testhooks.ErrCrash) { // the plugin died; kubelet retries with a new one
			restartPlugin(t, e, crash.hooks())
			err = call(e, op, s.claim)
		}
		if err != nil {
			t.Fatalf("after %s: %v", strings.Join(log, "; "), err)
		}
		if op == "unprepare" {
			e.node.Release(s.claim)
			s.claim = nil
		}
		checkInvariant(t, e, slots, log)
	}
}

// checkInvariant compares what is on the node with what kubelet holds prepared.
func checkInvariant(t *testing.T, e *env, slots map[string]*slotState, log []string) {
	t.Helper()
	var wantSpecs, wantDirs []string
	for name, s := range slots {
		if s.claim == nil {
			continue
		}
		wantSpecs = append(wantSpecs, string(s.claim.UID))
		if name == "daemon" {
			wantDirs = append(wantDirs, string(s.domain))
		}
	}
	specs, err := e.node.Specs(computedomain.DriverName)
	if err != nil {
		t.Fatal(err)
	}
	var gotSpecs []string
	for _, sp := range specs {
		for _, w := range wantSpecs {
			if strings.Contains(sp, w) {
				gotSpecs = append(gotSpecs, w)
			}
		}
	}
	gotDirs := listDir(t, filepath.Join(e.node.StateDir, "domains"))
	for i := range gotDirs {
		gotDirs[i] = filepath.Base(gotDirs[i])
	}
	slices.Sort(wantSpecs)
	slices.Sort(gotSpecs)
	slices.Sort(wantDirs)
	slices.Sort(gotDirs)
	if diff := cmp.Diff(wantSpecs, gotSpecs); diff != "" || len(specs) != len(wantSpecs) {
		t.Fatalf("after %s: CDI specs %v (-want +got claims):\n%s", strings.Join(log, "; "), specs, diff)
	}
	if diff := cmp.Diff(wantDirs, gotDirs); diff != "" {
		t.Fatalf("after %s: daemon directories (-want +got):\n%s", strings.Join(log, "; "), diff)
	}
	rep, err := e.plugin.Reconcile(t.Context())
	if err != nil || len(rep.RolledBack) > 0 || len(rep.UnprepareFinished) > 0 || rep.Prepared != len(wantSpecs) {
		t.Fatalf("after %s: reconcile found %s (%v), want %d prepared and nothing to do", strings.Join(log, "; "), rep, err, len(wantSpecs))
	}
}
