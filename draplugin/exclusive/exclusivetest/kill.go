package exclusivetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// Kill is a crash test with a real SIGKILL. The test binary, started again as a child on a
// node directory, builds the plugin there (Plugin), prepares Claim and, when the unprepare is
// the operation under test, unprepares it, and kills its own process at the n-th crash point
// the operation passes. The parent then checks the node as a restarted plugin finds it.
//
// Call Child first in the test binary's TestMain, and EveryCrashPoint from the test.
type Kill struct {
	// Plugin builds the plugin of the node in dir with hooks, as the driver's serve would.
	Plugin func(ctx context.Context, dir string, hooks testhooks.Hooks) (*exclusive.Plugin, error)
	// Claim returns the allocated claim the child prepares (and unprepares).
	Claim func() *resourceapi.ResourceClaim
}

// The environment of a kill child: its node directory, the operation (prepare, or unprepare
// after an undisturbed prepare) and the crash point to die at.
const (
	killEnvDir = "EXCLUSIVETEST_KILL_DIR"
	killEnvOp  = "EXCLUSIVETEST_KILL_OP"
	killEnvAt  = "EXCLUSIVETEST_KILL_AT"
)

// Child runs the kill child and exits when this process is one; otherwise it returns at once.
func (k Kill) Child() {
	if dir := os.Getenv(killEnvDir); dir != "" {
		os.Exit(k.child(dir, os.Getenv(killEnvOp), os.Getenv(killEnvAt)))
	}
}

// child runs op on the node in dir and kills its own process at crash point at, printing each
// point it passes first. It returns 0 when op passed fewer points, 2 when it failed.
func (k Kill) child(dir, op, atText string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 2 }
	at, err := strconv.Atoi(atText)
	if err != nil {
		return fail(fmt.Errorf("%s=%q: %w", killEnvAt, atText, err))
	}
	armed, seen := op == "prepare", 0
	hooks := testhooks.Hooks{AfterStep: func(point testhooks.CrashPoint, _ types.UID) error {
		if !armed {
			return nil
		}
		seen++
		fmt.Println(point)
		if seen == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute) // the signal is on its way
		}
		return nil
	}}
	ctx := context.Background()
	p, err := k.Plugin(ctx, dir, hooks)
	if err != nil {
		return fail(err)
	}
	c := k.Claim()
	if _, err := kubelettest.Prepare(ctx, p, c); err != nil {
		return fail(err)
	}
	if op == "unprepare" {
		armed = true
		if err := kubelettest.Unprepare(ctx, p, c); err != nil {
			return fail(err)
		}
	}
	return 0
}

// EveryCrashPoint kills the prepare, then the unprepare, at every crash point in turn. For each
// kill it takes a node directory from newDir, runs a child on it until the child is killed,
// and runs check as the subtest "<op>/<n>-<point>" with the directory, the operation and the
// point of the kill. A child that ends by itself has passed every point of its operation; one
// that passes none, or ends other than by SIGKILL, fails the test.
func (k Kill) EveryCrashPoint(t *testing.T, newDir func(t *testing.T) string, check func(t *testing.T, dir, op string, point testhooks.CrashPoint)) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"prepare", "unprepare"} {
		for n := 1; ; n++ {
			dir := newDir(t)
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), killEnvDir+"="+dir, killEnvOp+"="+op, killEnvAt+"="+strconv.Itoa(n))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err == nil {
				if n == 1 {
					t.Fatalf("%s passed no crash point", op)
				}
				break // every point was tried
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("%s, kill at crash point %d: child ended with %v, not SIGKILL: %s", op, n, err, stderr.String())
			}
			point := testhooks.CrashPoint(lastLine(out))
			t.Run(fmt.Sprintf("%s/%d-%s", op, n, point), func(t *testing.T) { check(t, dir, op, point) })
		}
	}
}

// lastLine is the last line of out.
func lastLine(out []byte) string {
	var last string
	for s := bufio.NewScanner(bytes.NewReader(out)); s.Scan(); {
		last = s.Text()
	}
	return last
}
