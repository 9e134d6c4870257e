package nodeplugin_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// TestCrashAtEveryPoint kills prepare and unprepare of a channel claim and of a daemon claim at
// every crash point in turn, restarts the plugin on the same node and checks what reconciliation
// leaves: nothing of the claim (no spec, no record, no daemon directory, no checkpoint entry),
// or, once the claim was recorded as prepared, all of it. Then kubelet's retry of the
// interrupted call succeeds and leaves the node as the call would have.
func TestCrashAtEveryPoint(t *testing.T) {
	kinds := []struct {
		name   string
		claim  func() *resourceapi.ResourceClaim
		traces func(e *env) int // what a prepared claim of this kind leaves besides its spec
	}{
		{"channel", func() *resourceapi.ResourceClaim { return claim("job", channelSel, channelParams(domainUID, "")) },
			func(*env) int { return 0 }},
		{"daemon", func() *resourceapi.ResourceClaim { return claim("imex", daemonSel, daemonParams(domainUID)) },
			func(e *env) int { return len(listDir(e.t, filepath.Join(e.node.StateDir, "domains"))) }},
	}
	for _, kind := range kinds {
		for _, op := range []string{"prepare", "unprepare"} {
			for k := 1; ; k++ {
				c := kind.claim()
				crash := testhooks.CrashAt(c.UID, k)
				e := newEnv(t, envConfig{hooks: crash.Hooks()})
				if err := e.client.Create(t.Context(), domain("train", domainUID, e.clique, 0, v1beta1.StatusReady, map[string]string{e.nodeName: v1beta1.StatusReady})); err != nil {
					t.Fatal(err)
				}
				c = e.allocate(c)
				if op == "unprepare" {
					crash.Arm(false)
					if _, err := kubelettest.Prepare(t.Context(), e.plugin, c); err != nil {
						t.Fatal(err)
					}
					crash.Arm(true)
				}
				err := call(e, op, c)
				if err == nil {
					if k == 1 {
						t.Fatalf("%s %s passed no crash point", kind.name, op)
					}
					break // every point was tried
				}
				if !errors.Is(err, testhooks.ErrCrash) {
					t.Fatalf("%s %s crash %d: unexpected error %v", kind.name, op, k, err)
				}
				point := crash.Seen()[k-1]
				t.Run(fmt.Sprintf("%s/%s/%d-%s", kind.name, op, k, point), func(t *testing.T) {
					restartPlugin(t, e, testhooks.Hooks{})
					if op == "prepare" && point == testhooks.CrashAfterPrepareCompleted {
						if specs, _ := e.node.Specs(computedomain.DriverName); len(specs) != 1 {
							t.Fatalf("a completed prepare was not kept whole: specs %v", specs)
						}
					} else if got := e.leftovers(); len(got) > 0 {
						t.Fatalf("an interrupted %s left: %v", op, got)
					}
					if err := call(e, op, c); err != nil {
						t.Fatalf("retried %s: %v", op, err)
					}
					specs, _ := e.node.Specs(computedomain.DriverName)
					if op == "prepare" && (len(specs) != 1 || kind.traces(e) != map[string]int{"channel": 0, "daemon": 1}[kind.name]) {
						t.Fatalf("retried prepare: specs %v, daemon directories %d", specs, kind.traces(e))
					}
					if op == "unprepare" {
						if got := e.leftovers(); len(got) > 0 {
							t.Fatalf("retried unprepare left: %v", got)
						}
					}
				})
			}
		}
	}
}

// call makes kubelet's prepare or unprepare call of c.
func call(e *env, op string, c *resourceapi.ResourceClaim) error {
	if op == "prepare" {
		_, err := kubelettest.Prepare(e.t.Context(), e.plugin, c)
		return err
	}
	return kubelettest.Unprepare(e.t.Context(), e.plugin, c)
}

// restartPlugin replaces e's plugin, as a killed process is replaced, by a new one on the same
// node with hooks, and reconciles.
func restartPlugin(t *testing.T, e *env, hooks testhooks.Hooks) {
	t.Helper()
	_ = e.plugin.Close()
	p, err := e.node.NewPlugin(t.Context(), exclusive.Config{DriverName: computedomain.DriverName, Driver: e.driver, TestHooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	e.plugin = p
	t.Cleanup(func() { _ = p.Close() })
	if _, err := p.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
}
