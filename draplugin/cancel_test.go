package draplugin_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/locks"
)

// TestUnprepareOfAPrepareKubeletGaveUpOn: kubelet's prepare call ends (its deadline) and, the pod
// gone, kubelet unprepares the claim while the plugin still works on the prepare, before the
// checkpoint holds the claim. Kubelet has forgotten the claim then and will never unprepare it
// again, so nothing of it may stay, whatever order the two calls get the GPU locks in.
//   - waiting: the prepare waits for a GPU lock that another plugin process holds (a rolling
//     update; another claim's long MIG or MPS step would do the same). It must give up once it
//     has the locks, as its call is over.
//   - working: the prepare has the locks and has written the CDI spec (an exclusive GPU records
//     nothing before it completes). The unprepare must wait for it and then undo it.
func TestUnprepareOfAPrepareKubeletGaveUpOn(t *testing.T) {
	claims := []struct {
		name    string
		dynamic bool
		class   string
		sel     string
	}{
		{"exclusive GPU", false, gpudra.GPUDeviceClassName, gpuIndex(1)},
		{"dynamic MIG", true, gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0)},
	}
	for _, situation := range []string{"waiting", "working"} {
		for _, tc := range claims {
			t.Run(situation+"/"+tc.name, func(t *testing.T) {
				e := newEnv(t, "dgx-a100-40gb", tc.dynamic)
				c := e.claim(tc.class, tc.sel, "")
				// hold stands for what keeps the prepare busy; the returned func lets it go on.
				var hold func() func()
				var hooks testhooks.Hooks
				switch situation {
				case "waiting":
					hold = func() func() { return holdAllGPULocks(t, e) }
				case "working":
					inStep, goOn := make(chan struct{}), make(chan struct{})
					hooks.AfterStep = func(point testhooks.CrashPoint, uid types.UID) error {
						if point == testhooks.CrashAfterCDIWritten && uid == c.UID {
							close(inStep)
							<-goOn
						}
						return nil
					}
					hold = func() func() {
						return func() {
							select {
							case <-inStep:
							case <-time.After(10 * time.Second):
								t.Fatal("the prepare never wrote the claim's CDI spec")
							}
							close(goOn)
						}
					}
				}
				p := e.plugin(withHooks(hooks))
				e.reconcile(p)
				release := hold()
				ctx, cancel := context.WithCancel(context.Background())
				prepared := make(chan error, 1)
				go func() {
					res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
					prepared <- errors.Join(err, res[c.UID].Err)
				}()
				time.Sleep(100 * time.Millisecond) // the prepare is held
				cancel()
				unprepared := make(chan error, 1)
				go func() { unprepared <- unprepareOne(t, p, c) }()
				time.Sleep(100 * time.Millisecond) // the unprepare may wait for the prepare
				release()
				if err := <-unprepared; err != nil {
					t.Fatalf("kubelet's unprepare: %v", err)
				}
				err := <-prepared
				if situation == "waiting" && !errors.Is(err, context.Canceled) {
					t.Errorf("prepare given up by kubelet while it waited for the locks returned %v, want an error wrapping context.Canceled", err)
				}
				if slices.Contains(e.specs(), string(c.UID)) {
					t.Errorf("CDI spec of the claim left behind: %v", e.specs())
				}
				if inst := e.MIGInstances(); len(inst) != 0 {
					t.Errorf("MIG instances left behind: %v", inst)
				}
				if rep := e.reconcile(e.plugin()); rep.Prepared != 0 {
					t.Errorf("a restarted plugin holds %d prepared claim(s) that kubelet has forgotten", rep.Prepared)
				}
			})
		}
	}
}

// holdAllGPULocks takes every GPU lock as another plugin process would and returns their release.
func holdAllGPULocks(t *testing.T, e *env) func() {
	t.Helper()
	other, err := locks.NewLocks(e.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, g := range e.Inventory.GPUs {
		all = append(all, g.UUID)
	}
	release, err := other.Lock(all)
	if err != nil {
		t.Fatal(err)
	}
	return release
}

// TestStopWaitsForOperationsUnderWay: Stop must not return while a prepare works on the node
// (here between creating its MIG instance and writing its spec): the driver releases NVML after
// Stop, which would cut the prepare, or its rollback, short and leave the node half changed.
// Found by review.
func TestStopWaitsForOperationsUnderWay(t *testing.T) {
	e := newEnv(t, "dgx-a100-40gb", true)
	c := e.claim(gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 0), "")
	inStep, goOn := make(chan struct{}), make(chan struct{})
	p := e.plugin(withHooks(testhooks.Hooks{AfterStep: func(point testhooks.CrashPoint, uid types.UID) error {
		if point == testhooks.CrashAfterMIGCreated {
			close(inStep)
			<-goOn
		}
		return nil
	}}))
	e.reconcile(p)
	prepared := make(chan error, 1)
	go func() {
		_, err := prepareOne(t, p, c)
		prepared <- err
	}()
	<-inStep
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a prepare was under way")
	case <-time.After(200 * time.Millisecond):
	}
	close(goOn)
	<-stopped
	if err := <-prepared; err != nil {
		t.Fatalf("the prepare under way when Stop was called: %v", err)
	}
	if !slices.Contains(e.specs(), string(c.UID)) || len(e.MIGInstances()) != 1 {
		t.Errorf("after Stop: specs %v, MIG instances %v; want the prepare finished", e.specs(), e.MIGInstances())
	}
}
