package exclusive_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// errCrash is what the crash hook returns: the plugin stops where it is, as a killed process.
var errCrash = errors.New("crash")

// crasher stops the plugin at the n-th crash point it passes (1-based) and records the points.
type crasher struct {
	mu   sync.Mutex
	n    int
	seen []testhooks.CrashPoint
}

func (c *crasher) hooks() testhooks.Hooks {
	return testhooks.Hooks{AfterStep: func(point testhooks.CrashPoint, _ types.UID) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.seen = append(c.seen, point)
		if len(c.seen) == c.n {
			return errCrash
		}
		return nil
	}}
}

// TestCrashAtEveryPoint kills prepare and unprepare of a two-device claim at every crash point
// in turn, restarts the plugin on the same node and checks what reconciliation leaves: nothing
// of the claim (no spec, no device held, no entry), or, once the claim was recorded as
// prepared, all of it. Then kubelet's retry of the interrupted call succeeds and leaves the
// node as the call would have.
func TestCrashAtEveryPoint(t *testing.T) {
	for _, op := range []string{"prepare", "unprepare"} {
		for k := 1; ; k++ {
			n := newNode(t, 3)
			c := allocated("c", result(nodeName, "accel-0"), result(nodeName, "accel-2"))
			cr := &crasher{n: k}
			if op == "unprepare" {
				cr.n = 0 // armed below
			}
			p := n.plugin(cr.hooks())
			_, err := kubelettest.Prepare(t.Context(), p, c)
			if op == "unprepare" {
				if err != nil {
					t.Fatal(err)
				}
				cr.mu.Lock()
				cr.seen, cr.n = nil, k
				cr.mu.Unlock()
				err = kubelettest.Unprepare(t.Context(), p, c)
			}
			if err == nil {
				if k == 1 {
					t.Fatalf("%s passed no crash point", op)
				}
				break // every point was tried
			}
			if !errors.Is(err, errCrash) {
				t.Fatalf("%s crash %d: unexpected error %v", op, k, err)
			}
			point := cr.seen[k-1]
			t.Run(fmt.Sprintf("%s/%d-%s", op, k, point), func(t *testing.T) {
				p2, rep := n.restart(p)
				held, _ := n.driver.state()
				prepared := op == "prepare" && point == testhooks.CrashAfterPrepareCompleted
				if prepared {
					if rep.Prepared != 1 || len(held) != 2 || len(n.specs()) != 1 {
						t.Fatalf("a completed prepare was not kept whole: report %s, held %v, specs %v", rep, held, n.specs())
					}
				} else if rep.Prepared != 0 || len(held) > 0 || len(n.specs()) > 0 {
					t.Fatalf("an interrupted %s left: report %s, held %v, specs %v", op, rep, held, n.specs())
				}
				// kubelet retries the call that never answered.
				if op == "prepare" {
					devices, err := kubelettest.Prepare(t.Context(), p2, c)
					if err != nil || len(devices) != 2 {
						t.Fatalf("retried prepare: %v, %v", devices, err)
					}
					if held, _ := n.driver.state(); held["accel-0"] != c.UID || held["accel-2"] != c.UID {
						t.Fatalf("retried prepare: held %v", held)
					}
					return
				}
				if err := kubelettest.Unprepare(t.Context(), p2, c); err != nil {
					t.Fatalf("retried unprepare: %v", err)
				}
				if held, _ := n.driver.state(); len(held) > 0 || len(n.specs()) > 0 {
					t.Fatalf("retried unprepare left: held %v, specs %v", held, n.specs())
				}
			})
		}
	}
}
