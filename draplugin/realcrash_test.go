package draplugin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/vfio"
)

// The real crash test runs the plugin in a child process (this test binary, re-executed) and
// kills it with SIGKILL at the n-th side effect: a crash point of the plugin, a changing NVML
// call (MIG instance or mode, compute mode) or a host change (time slice, compute mode, MPS
// daemon, mount). The fake machine and host keep their state in files, as hardware keeps its
// state when the process driving it dies. The parent plays kubelet over the plugin's real
// sockets and retries what did not answer, then checks the node.

const (
	crashEnvDir     = "GPUDRA_CRASH_CHILD" // the node directory; set in a child
	crashEnvPod     = "GPUDRA_CRASH_POD"
	crashEnvKill    = "GPUDRA_CRASH_KILL" // n: SIGKILL at the n-th side effect; 0: never
	crashEnvMachine = "GPUDRA_CRASH_MACHINE"
	crashEnvDynamic = "GPUDRA_CRASH_DYNAMIC"
	crashEnvVFIO    = "GPUDRA_CRASH_VFIO" // the node passes GPUs through (WithPassthrough)
)

var crashAll = flag.Bool("crash.all", false, "TestRealCrash: kill at every side effect (default: a sample)")

func TestMain(m *testing.M) {
	if os.Getenv(crashEnvDir) != "" {
		os.Exit(crashChild())
	}
	if os.Getenv(memEnvDir) != "" {
		os.Exit(memChild())
	}
	os.Exit(m.Run())
}

// killer counts side effects and kills its process at the n-th.
type killer struct {
	mu    sync.Mutex
	limit int
	count int
	log   *os.File
}

// mutating are the NVML calls that change the machine.
var mutating = []string{"CreateGpuInstanceWithPlacement", "CreateGpuInstance", "CreateComputeInstance",
	"CreateComputeInstanceWithPlacement", "GpuInstance.Destroy", "ComputeInstance.Destroy", "SetMigMode", "SetComputeMode"}

func (k *killer) event(kind, name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.count++
	fmt.Fprintf(k.log, "%d %s %s\n", k.count, kind, name)
	if k.count == k.limit {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

func (k *killer) nvml(call string) {
	if slices.ContainsFunc(mutating, func(m string) bool { return call == "Device."+m || call == m || strings.HasSuffix(call, "."+m) }) {
		k.event("nvml", call)
	}
}

func (k *killer) host(call string) error { k.event("host", call); return nil }

func (k *killer) point(p testhooks.CrashPoint, uid string) error {
	k.event("point", string(p)+" "+uid)
	return nil
}

// crashChild is a plugin pod: it serves the node of its directory until killed.
func crashChild() int {
	dir, pod := os.Getenv(crashEnvDir), os.Getenv(crashEnvPod)
	limit, _ := strconv.Atoi(os.Getenv(crashEnvKill))
	fail := func(err error) int {
		_ = os.WriteFile(filepath.Join(dir, pod, "error"), []byte(err.Error()), 0o600)
		return 3
	}
	log, err := os.OpenFile(filepath.Join(dir, pod, "events.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	k := &killer{limit: limit, log: log}
	opts := []draplugintest.NodeOption{draplugintest.WithDir(dir), draplugintest.WithPersistence(),
		draplugintest.WithMachineOptions(gputest.WithCallHook(k.nvml)), draplugintest.WithHostHook(k.host)}
	if os.Getenv(crashEnvDynamic) != "" {
		opts = append(opts, draplugintest.WithDynamicMIG())
	}
	if os.Getenv(crashEnvVFIO) != "" {
		opts = append(opts, draplugintest.WithPassthrough())
	}
	node, err := draplugintest.NewNode(os.Getenv(crashEnvMachine), opts...)
	if err != nil {
		return fail(err)
	}
	claims, err := readClaims(dir)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	p, err := node.NewPlugin(ctx, func(c *draplugin.Config) {
		c.TestHooks.AfterStep = func(pt testhooks.CrashPoint, uid types.UID) error { return k.point(pt, string(uid)) }
		c.SuperviseInterval = -1
		if node.PCI != nil { // every sysfs write is a side effect too
			c.Passthrough, err = vfio.NewSysfsBinder(vfio.WithFS(node.PCI), vfio.WithRoots(node.PCI.SysfsRoot(), node.PCI.DevRoot(), node.PCI.ProcRoot()),
				vfio.WithStepHook(func(s vfio.Step, fn string) error { k.event("sysfs", string(s)+" "+fn); return nil }))
		}
	})
	if err != nil {
		return fail(err)
	}
	podDir := filepath.Join(dir, pod)
	if _, err := node.Serve(ctx, p, draplugin.StartConfig{RegistrarDir: filepath.Join(podDir, "r"), PluginDir: filepath.Join(podDir, "d"),
		NoHealthMonitor: true, NoPublish: true}, claims...); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(podDir, "ready"), nil, 0o600); err != nil {
		return fail(err)
	}
	select {}
}

func readClaims(dir string) ([]*resourceapi.ResourceClaim, error) {
	b, err := os.ReadFile(filepath.Join(dir, "claims.json"))
	if err != nil {
		return nil, err
	}
	var claims []*resourceapi.ResourceClaim
	return claims, json.Unmarshal(b, &claims)
}

// crashScenario is a node and the claims kubelet prepares and unprepares on it.
type crashScenario struct {
	name    string
	machine string
	dynamic bool
	// vfio passes GPUs through (draplugintest.WithPassthrough).
	vfio   bool
	opts   []gputest.Option
	claims func(n *draplugintest.Node) ([]*resourceapi.ResourceClaim, error)
}

// env builds the scenario's node in-process.
func (sc crashScenario) env(t testing.TB) *env {
	nopts := []draplugintest.NodeOption{draplugintest.WithMachineOptions(sc.opts...)}
	if sc.dynamic {
		nopts = append(nopts, draplugintest.WithDynamicMIG())
	}
	if sc.vfio {
		nopts = append(nopts, draplugintest.WithPassthrough())
	}
	return newEnvWith(t, sc.machine, nopts...)
}

func allocate(n *draplugintest.Node, specs ...[4]string) ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	for _, s := range specs {
		c, err := n.Allocate(context.Background(), draplugintest.Claim(s[0], s[1], s[2], s[3]))
		if err != nil {
			return nil, fmt.Errorf("allocate %s: %w", s[0], err)
		}
		out = append(out, c)
	}
	return out, nil
}

const sharedMPSConfig = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`

var crashScenarios = []crashScenario{
	{name: "dynamic", machine: "dgx-a100-40gb", dynamic: true, claims: func(n *draplugintest.Node) ([]*resourceapi.ResourceClaim, error) {
		cs, err := allocate(n,
			[4]string{"exclusive", gpudra.GPUDeviceClassName, gpuIndex(0), ""},
			[4]string{"timeslice", gpudra.GPUDeviceClassName, gpuIndex(1), timeSlicingConfig},
			[4]string{"mps", gpudra.GPUDeviceClassName, gpuIndex(2), mpsConfig},
			[4]string{"mig-1g", gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 3), ""},
			[4]string{"mig-3g", gpudra.MIGDeviceClassName, migProfileOn("3g.20gb", 3), ""},
		)
		if err != nil {
			return nil, err
		}
		// A claim with two GPUs.
		two := draplugintest.Claim("two-gpus", gpudra.GPUDeviceClassName, "device.attributes['gpu.nvidia.com'].index >= 6", "")
		two.Spec.Devices.Requests[0].Exactly.Count = 2
		c, err := n.Allocate(context.Background(), two)
		if err != nil {
			return nil, fmt.Errorf("allocate two-gpus: %w", err)
		}
		return append(cs, c), nil
	}},
	// Issue 32: GPUs passed through to virtual machines beside dynamic MIG and a container GPU;
	// every sysfs write of a bind or an unbind is a side effect the test kills at.
	{name: "passthrough", machine: "dgx-a100-40gb", dynamic: true, vfio: true, claims: func(n *draplugintest.Node) ([]*resourceapi.ResourceClaim, error) {
		cs, err := allocate(n,
			[4]string{"vm-1", gpudra.VFIODeviceClassName, gpuIndex(1), ""},
			[4]string{"exclusive", gpudra.GPUDeviceClassName, gpuIndex(0), ""},
			[4]string{"mig-1g", gpudra.MIGDeviceClassName, migProfileOn("1g.5gb", 3), ""},
			[4]string{"vm-5", gpudra.VFIODeviceClassName, gpuIndex(5), ""},
		)
		if err != nil {
			return nil, err
		}
		two := draplugintest.Claim("two-vms", gpudra.VFIODeviceClassName, "device.attributes['gpu.nvidia.com'].index >= 6", "")
		two.Spec.Devices.Requests[0].Exactly.Count = 2
		c, err := n.Allocate(context.Background(), two)
		if err != nil {
			return nil, fmt.Errorf("allocate two-vms: %w", err)
		}
		return append(cs, c), nil
	}},
	{name: "static-and-shared", machine: "dgx-a100-40gb", opts: []gputest.Option{gputest.WithMIG(0, "3g.20gb", "3g.20gb")},
		claims: func(n *draplugintest.Node) ([]*resourceapi.ResourceClaim, error) {
			cs, err := allocate(n,
				[4]string{"static-mig", gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 0", ""},
				[4]string{"static-mig-mps", gpudra.MIGDeviceClassName, "device.attributes['gpu.nvidia.com'].parentIndex == 0", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`},
			)
			if err != nil {
				return nil, err
			}
			// Two claims sharing one GPU's MPS daemon (the same device, with share IDs).
			for _, name := range []string{"shared-a", "shared-b"} {
				c := draplugintest.Claim(name, gpudra.GPUDeviceClassName, gpuIndex(4), sharedMPSConfig)
				shareDevice(c, n, 4)
				cs = append(cs, c)
			}
			return cs, nil
		}},
}

// shareDevice allocates the claim the GPU with that index with a share ID, as consumable
// capacity would, bypassing the allocator (the node does not publish consumable memory).
func shareDevice(c *resourceapi.ResourceClaim, n *draplugintest.Node, index int) {
	id := types.UID("share-" + c.Name)
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: gpudra.DefaultDriverName, Pool: n.Name,
			Device: gpudra.GPUDeviceName(n.Inventory.GPUs[index].Minor), ShareID: &id}},
		Config: []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim, Requests: []string{"gpu"},
			DeviceConfiguration: c.Spec.Devices.Config[0].DeviceConfiguration}}}}
}

// crashPod is one plugin process.
type crashPod struct {
	name    string
	cmd     *exec.Cmd
	exited  chan struct{}
	kubelet *draplugintest.Kubelet
}

// crashRun is one run of a scenario: a node directory, the plugin processes serving it, and
// kubelet's view of the claims.
type crashRun struct {
	t        *testing.T
	sc       crashScenario
	dir      string
	node     *draplugintest.Node // the parent's: allocation and reboots
	claims   []*resourceapi.ResourceClaim
	prepared map[types.UID]bool   // kubelet got a successful prepare and no unprepare since
	pending  map[types.UID]string // operations kubelet retries: "prepare" or "unprepare"
	pods     []*crashPod
	started  int
	log      []string
}

func newCrashRun(t *testing.T, sc crashScenario) *crashRun {
	dir, err := os.MkdirTemp("", "gdc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	opts := []draplugintest.NodeOption{draplugintest.WithDir(dir), draplugintest.WithPersistence(), draplugintest.WithMachineOptions(sc.opts...)}
	if sc.dynamic {
		opts = append(opts, draplugintest.WithDynamicMIG())
	}
	if sc.vfio {
		opts = append(opts, draplugintest.WithPassthrough())
	}
	node, err := draplugintest.NewNode(sc.machine, opts...)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := sc.claims(node)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "claims.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := &crashRun{t: t, sc: sc, dir: dir, node: node, claims: claims, prepared: map[types.UID]bool{}, pending: map[types.UID]string{}}
	t.Cleanup(r.stopAll)
	return r
}

func (r *crashRun) logf(format string, args ...any) {
	r.log = append(r.log, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

// startPod starts a plugin process that kills itself at its kill-th side effect. It returns
// nil when the process died before it served (a kill during its start-up reconciliation).
func (r *crashRun) startPod(kill int) *crashPod {
	r.started++
	p := &crashPod{name: fmt.Sprintf("pod-%d", r.started), exited: make(chan struct{})}
	podDir := filepath.Join(r.dir, p.name)
	if err := os.MkdirAll(podDir, 0o700); err != nil {
		r.t.Fatal(err)
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), crashEnvDir+"="+r.dir, crashEnvPod+"="+p.name, crashEnvKill+"="+strconv.Itoa(kill),
		crashEnvMachine+"="+r.sc.machine)
	if r.sc.dynamic {
		p.cmd.Env = append(p.cmd.Env, crashEnvDynamic+"=1")
	}
	if r.sc.vfio {
		p.cmd.Env = append(p.cmd.Env, crashEnvVFIO+"=1")
	}
	if err := p.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	r.logf("start %s (kill at %d)", p.name, kill)
	deadline := time.After(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(podDir, "ready")); err == nil {
			break
		}
		select {
		case <-p.exited:
			if b, err := os.ReadFile(filepath.Join(podDir, "error")); err == nil {
				r.t.Fatalf("%s failed: %s", p.name, b)
			}
			r.logf("%s died during start-up", p.name)
			return nil
		case <-deadline:
			r.t.Fatalf("%s did not start", p.name)
		case <-time.After(5 * time.Millisecond):
		}
	}
	r.logf("%s ready", p.name)
	k, err := draplugintest.ConnectKubelet(context.Background(), filepath.Join(podDir, "r", gpudra.DefaultDriverName+"-reg.sock"), gpudra.DefaultDriverName)
	if err != nil {
		r.t.Fatal(err)
	}
	p.kubelet = k
	r.logf("%s connected", p.name)
	r.pods = append(r.pods, p)
	return p
}

func (r *crashRun) stopAll() {
	for _, p := range slices.Clone(r.pods) {
		r.kill(p)
	}
}

func (r *crashRun) kill(p *crashPod) {
	_ = p.cmd.Process.Kill()
	<-p.exited
	if p.kubelet != nil {
		p.kubelet.Close()
	}
	r.pods = slices.DeleteFunc(r.pods, func(q *crashPod) bool { return q == p })
}

// events returns how many side effects the pod's process counted.
func (r *crashRun) events(p *crashPod) int {
	f, err := os.Open(filepath.Join(r.dir, p.name, "events.log"))
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		n++
	}
	return n
}

// call sends one prepare or unprepare for claims to a pod, as kubelet does, and updates
// kubelet's view; it reports whether the pod died.
func (r *crashRun) call(p *crashPod, op string, claims []*resourceapi.ResourceClaim) (died bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs map[string]string
	var err error
	switch op {
	case "prepare":
		resp, e := p.kubelet.Prepare(ctx, claims...)
		err = e
		if e == nil {
			errs = map[string]string{}
			for uid, c := range resp.Claims {
				errs[uid] = c.Error
			}
		}
	case "unprepare":
		resp, e := p.kubelet.Unprepare(ctx, claims...)
		err = e
		if e == nil {
			errs = map[string]string{}
			for uid, c := range resp.Claims {
				errs[uid] = c.Error
			}
		}
	}
	for _, c := range claims {
		ok := err == nil && errs[string(c.UID)] == ""
		r.logf("%s %s via %s: ok=%t", op, c.Name, p.name, ok)
		switch {
		case ok && op == "prepare":
			r.prepared[c.UID] = true
			delete(r.pending, c.UID)
		case ok:
			delete(r.prepared, c.UID)
			delete(r.pending, c.UID)
		default:
			r.pending[c.UID] = op
			if op == "unprepare" {
				delete(r.prepared, c.UID)
			}
		}
	}
	if err == nil {
		return false
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		r.t.Fatalf("%s %v via %s failed but the process lives: %v", op, names(claims), p.name, err)
	}
	r.logf("%s died", p.name)
	r.kill(p)
	return true
}

func names(cs []*resourceapi.ResourceClaim) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// pod returns a live pod, starting one (that never kills itself) when none is left.
func (r *crashRun) pod() *crashPod {
	for len(r.pods) == 0 {
		r.startPod(0)
	}
	return r.pods[len(r.pods)-1]
}

// settle retries what kubelet owes until it succeeds.
func (r *crashRun) settle() {
	for range 5 {
		if len(r.pending) == 0 {
			return
		}
		for _, op := range []string{"unprepare", "prepare"} {
			var cs []*resourceapi.ResourceClaim
			for _, c := range r.claims {
				if r.pending[c.UID] == op {
					cs = append(cs, c)
				}
			}
			if len(cs) > 0 {
				r.call(r.pod(), op, cs)
			}
		}
	}
	r.t.Fatalf("kubelet's retries did not succeed: %v", r.pending)
}

// script is kubelet's work: prepare the first claims at once, unprepare some, prepare the
// others, unprepare everything. A dead pod is replaced and what it did not answer retried.
func (r *crashRun) script(check func()) {
	half := (len(r.claims) + 1) / 2
	steps := []struct {
		op     string
		claims []*resourceapi.ResourceClaim
	}{
		{"prepare", r.claims[:half]},
		{"unprepare", r.claims[:half/2]},
		{"prepare", r.claims[half:]},
		{"unprepare", r.claims},
	}
	for _, s := range steps {
		if r.call(r.pod(), s.op, s.claims) {
			r.settle()
			check()
		}
	}
	r.settle()
}

// check compares the node with kubelet's view: the claims kubelet considers prepared have their
// spec, and a plugin started now finds them all prepared and nothing to repair; when none is
// prepared, nothing is left at all: no spec, no MIG instance the scenario did not start with,
// no host setting, no daemon, no mount, no checkpoint entry.
func (r *crashRun) check() {
	t := r.t
	var want []string
	for _, c := range r.claims {
		if r.prepared[c.UID] {
			want = append(want, string(c.UID))
		}
	}
	slices.Sort(want)
	opts := []draplugintest.NodeOption{draplugintest.WithDir(r.dir), draplugintest.WithPersistence(), draplugintest.WithMachineOptions(r.sc.opts...)}
	if r.sc.dynamic {
		opts = append(opts, draplugintest.WithDynamicMIG())
	}
	if r.sc.vfio {
		opts = append(opts, draplugintest.WithPassthrough())
	}
	n, err := draplugintest.NewNode(r.sc.machine, opts...)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := n.Specs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(specs, want) {
		t.Errorf("CDI specs %v, want those of the claims kubelet considers prepared %v", specs, want)
	}
	p, err := n.NewPlugin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	rep, err := p.Reconcile(context.Background())
	if err != nil || rep.Prepared != len(want) || len(rep.RolledBack)+len(rep.UnprepareFinished)+len(rep.SpecsPruned)+len(rep.MIGDestroyed)+len(rep.SpecsRewritten) > 0 {
		t.Errorf("a plugin started now finds %v, %v; want %d prepared claims and nothing to repair", rep, err, len(want))
	}
	if len(want) == 0 {
		r.checkEmpty(n)
	}
}

// checkEmpty checks that nothing of any claim is left on the node.
func (r *crashRun) checkEmpty(n *draplugintest.Node) {
	if err := n.HostClean(); err != nil {
		r.t.Errorf("host: %v", err)
	}
	inv, err := nvmlgpu.Enumerate(context.Background(), n.Machine)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, g := range inv.GPUs {
		if r.sc.dynamic && len(g.MIGDevices) > 0 {
			r.t.Errorf("GPU %d has MIG devices %v after every claim was unprepared", g.Index, g.MIGDevices)
		}
	}
	if !r.sc.dynamic {
		if got := len(inv.GPUs[0].MIGDevices); got != 2 {
			r.t.Errorf("GPU 0 has %d MIG devices, want its two static ones", got)
		}
	}
	if st := n.Host.State(); len(st.Daemons)+len(st.Mounts) > 0 {
		r.t.Errorf("daemons %v, mounts %v left", slices.Collect(maps.Keys(st.Daemons)), st.Mounts)
	}
}

func (r *crashRun) fail() {
	if r.t.Failed() || os.Getenv("CRASH_TRACE") != "" {
		r.t.Logf("kubelet and pods:\n  %s", strings.Join(r.log, "\n  "))
	}
}

// TestRealCrash kills the plugin process at side effect n, for n over every side effect of the
// scenario (a sample of them unless -crash.all), restarts it, lets kubelet retry, and checks the
// node; also with a second kill during the restarted process's reconciliation, after a reboot
// instead of a restart, and with two plugin processes serving the node (a rolling update).
func TestRealCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns plugin processes")
	}
	for _, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			total := r0(t, sc)
			step, variants := max(1, total/10), []int{total / 4, total / 2, 3 * total / 4}
			if *crashAll {
				step = 1
			}
			for n := 1; n <= total; n += step {
				t.Run(fmt.Sprintf("kill-%d", n), func(t *testing.T) {
					r := newCrashRun(t, sc)
					defer r.fail()
					r.startPod(n)
					r.script(r.check)
					r.check()
				})
			}
			for _, n := range variants {
				t.Run(fmt.Sprintf("kill-%d-then-in-reconcile", n), func(t *testing.T) { crashTwice(t, sc, n) })
				t.Run(fmt.Sprintf("kill-%d-then-reboot", n), func(t *testing.T) { crashReboot(t, sc, n) })
				t.Run(fmt.Sprintf("rolling-update-kill-%d", n), func(t *testing.T) { crashRolling(t, sc, n) })
			}
		})
	}
}

// r0 runs the scenario without a kill and returns how many side effects it has.
func r0(t *testing.T, sc crashScenario) int {
	r := newCrashRun(t, sc)
	defer r.fail()
	p := r.startPod(0)
	r.script(r.check)
	r.check()
	n := r.events(p)
	if n == 0 {
		t.Fatal("the scenario has no side effects")
	}
	t.Logf("%s: %d side effects", sc.name, n)
	return n
}

// crashTwice kills the pod at side effect n, then the restarted one during its reconciliation.
func crashTwice(t *testing.T, sc crashScenario, n int) {
	r := newCrashRun(t, sc)
	defer r.fail()
	r.startPod(n)
	half := (len(r.claims) + 1) / 2
	if r.call(r.pod(), "prepare", r.claims[:half]) {
		for kill := 1; kill <= 3 && len(r.pods) == 0; kill++ {
			r.startPod(kill) // dies in its start-up reconciliation, or serves
		}
	}
	r.settle()
	r.check()
	r.call(r.pod(), "unprepare", r.claims)
	r.settle()
	r.check()
}

// crashReboot kills the pod at side effect n and reboots the node: kubelet then prepares the
// claims it considers prepared again, as it restarts their pods.
func crashReboot(t *testing.T, sc crashScenario, n int) {
	r := newCrashRun(t, sc)
	defer r.fail()
	r.startPod(n)
	r.script(func() {})
	half := (len(r.claims) + 1) / 2
	r.call(r.pod(), "prepare", r.claims[:half])
	r.settle()
	r.stopAll()
	r.logf("reboot")
	if err := r.node.Reboot(); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.claims {
		if r.prepared[c.UID] {
			r.pending[c.UID] = "prepare"
		}
	}
	r.settle()
	r.check()
	r.call(r.pod(), "unprepare", r.claims)
	r.settle()
	r.check()
}

// crashRolling serves the node with two pods, sends each claim's operations to alternating
// pods, and kills the older pod at side effect n.
func crashRolling(t *testing.T, sc crashScenario, n int) {
	r := newCrashRun(t, sc)
	defer r.fail()
	old := r.startPod(n)
	if old == nil {
		t.Fatal("the old pod died at start")
	}
	r.startPod(0)
	for i, c := range r.claims {
		p := r.pods[i%len(r.pods)]
		if r.call(p, "prepare", []*resourceapi.ResourceClaim{c}) {
			r.settle()
		}
	}
	r.settle()
	r.check()
	for i, c := range r.claims {
		p := r.pods[(i+1)%len(r.pods)]
		if r.call(p, "unprepare", []*resourceapi.ResourceClaim{c}) {
			r.settle()
		}
	}
	r.settle()
	r.check()
}
