package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// Workload is one file of examples/deploy/workloads, with what its header says about it.
type Workload struct {
	File    string
	Target  NodeSpec
	Fails   bool
	Objects []*unstructured.Unstructured
	// Pods is the number of pods it runs (Pods plus Deployment replicas).
	Pods int
}

var targetLine = regexp.MustCompile(`(?m)^# Target machine: ([^(\n]*)`)
var expectedLine = regexp.MustCompile(`(?m)^# Expected: (\S+)`)

// loadWorkloads reads every workload and its header: "# Target machine: <machine> [flags]"
// and "# Expected: FAILS ..." or "allocates ...", the convention the directory's README sets.
func loadWorkloads(dir string) ([]Workload, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []Workload
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		w := Workload{File: filepath.Base(f)}
		tm, em := targetLine.FindSubmatch(data), expectedLine.FindSubmatch(data)
		if tm == nil || em == nil {
			return nil, fmt.Errorf("%s: no '# Target machine:' or '# Expected:' line", w.File)
		}
		if w.Target, err = parseTarget(string(tm[1])); err != nil {
			return nil, fmt.Errorf("%s: %w", w.File, err)
		}
		w.Fails = strings.EqualFold(string(em[1]), "FAILS")
		if w.Objects, err = framework.DecodeObjects(data); err != nil {
			return nil, fmt.Errorf("%s: %w", w.File, err)
		}
		for _, o := range w.Objects {
			switch o.GetKind() {
			case "Pod":
				w.Pods++
			case "Deployment":
				w.Pods += replicas(o)
			}
		}
		out = append(out, w)
	}
	return out, nil
}

// replicas is a Deployment's spec.replicas (default 1); numbers decode as int64 or float64.
func replicas(o *unstructured.Unstructured) int {
	v, found, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
	switch r := v.(type) {
	case int64:
		return int(r)
	case float64:
		return int(r)
	}
	if found {
		panic(fmt.Sprintf("Deployment %s: spec.replicas %v (%T)", o.GetName(), v, v))
	}
	return 1
}

// parseTarget reads "dgx-a100-40gb --mig-config all-balanced" (a trailing "." ends it).
func parseTarget(s string) (NodeSpec, error) {
	f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(s), "."))
	if len(f) == 0 {
		return NodeSpec{}, fmt.Errorf("empty target machine")
	}
	spec := NodeSpec{Machine: strings.TrimSuffix(f[0], ".")}
	for i := 1; i < len(f); i++ {
		switch f[i] {
		case "--mig-config":
			if i+1 == len(f) {
				return NodeSpec{}, fmt.Errorf("--mig-config without a value in %q", s)
			}
			i++
			spec.MIGConfig = strings.TrimSuffix(f[i], ".")
		case "--dynamic-mig":
			spec.DynamicMIG = true
		case "--consumable-memory":
			spec.ConsumableMemory = true
		default:
			return NodeSpec{}, fmt.Errorf("unknown target flag %q in %q", f[i], s)
		}
	}
	return spec, nil
}

// targetKey names a target: its machine and flags.
func (spec NodeSpec) targetKey() string {
	k := spec.Machine
	if spec.MIGConfig != "" {
		k += " --mig-config " + spec.MIGConfig
	}
	if spec.DynamicMIG {
		k += " --dynamic-mig"
	}
	if spec.ConsumableMemory {
		k += " --consumable-memory"
	}
	return k
}

// TestSeedWorkloads applies every seed workload, as written, on a node running its target
// machine: the controller-manager creates the template claims, the real scheduler allocates
// and binds, and the test then acts as kubelet for each pod (prepare through the DRA socket,
// CDI injection checked against the allocation), deletes the pods and unprepares. Afterwards
// no CDI spec, MIG instance or host setting is left. Workloads expected to fail must stay
// Pending with the scheduler's "cannot allocate all claims". One node per target; targets run
// in parallel, the workloads of a target one after the other.
func TestSeedWorkloads(t *testing.T) {
	workloads, err := loadWorkloads(filepath.Join(suite.Repo, "examples/deploy/workloads"))
	if err != nil {
		t.Fatal(err)
	}
	byTarget := map[string][]Workload{}
	for _, w := range workloads {
		byTarget[w.Target.targetKey()] = append(byTarget[w.Target.targetKey()], w)
	}
	targets := keys(byTarget)
	sort.Strings(targets)
	for i, key := range targets {
		ws := byTarget[key]
		t.Run(strings.ReplaceAll(key, " ", "_"), func(t *testing.T) {
			t.Parallel()
			spec := ws[0].Target
			spec.Name = shortName(fmt.Sprintf("wl%d", i), spec.Machine)
			n := suite.StartNode(t, spec)
			for _, w := range ws {
				t.Run(strings.TrimSuffix(w.File, ".yaml"), func(t *testing.T) { runWorkload(t, n, w) })
			}
		})
	}
}

func runWorkload(t *testing.T, n *TestNode, w Workload) {
	ctx := context.Background()
	ns := shortName("w", strings.SplitN(w.File, "-", 2)[0], n.Spec.Name)
	if err := newWorkloadNamespace(ctx, ns, n.Spec.Name); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := deleteNamespace(ctx, ns); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	}()
	if err := suite.Applier.Apply(ctx, ns, w.Objects...); err != nil {
		t.Fatalf("apply %s as written: %v", w.File, err)
	}
	if w.Fails {
		msgs, err := waitUnschedulable(ctx, ns, w.Pods)
		if err != nil {
			t.Fatal(err)
		}
		for pod, msg := range msgs {
			t.Logf("pod %s Pending, scheduler: %s", pod, msg)
			if !strings.Contains(msg, "cannot allocate all claims") {
				t.Errorf("pod %s is Unschedulable, but not for its claims: %q", pod, msg)
			}
		}
		return
	}
	pods, err := waitScheduled(ctx, ns, w.Pods, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	kubeletRunsAndDeletes(t, n, ns, pods)
}

// kubeletRunsAndDeletes does what kubelet does for scheduled pods: prepare each pod's claims,
// (the runtime would inject the CDI devices), then, once the pods are deleted, unprepare their
// claims. The node must end as it started.
func kubeletRunsAndDeletes(t *testing.T, n *TestNode, ns string, pods []ScheduledPod) {
	t.Helper()
	ctx := context.Background()
	slices, err := Slices(ctx, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := Devices(slices)
	claims := map[string]*ScheduledPod{}
	var podNames []string
	for i := range pods {
		p := &pods[i]
		resp, err := n.prepare(ctx, p.Claims...)
		if err != nil {
			t.Fatalf("prepare for pod %s: %v", p.Pod.Name, err)
		}
		if err := n.checkPrepared(resp, p.Claims, pool); err != nil {
			t.Errorf("pod %s: %v", p.Pod.Name, err)
		}
		n.checkWholeGPUs(t, p.Claims, pool)
		for _, c := range p.Claims {
			claims[string(c.UID)] = p
		}
		podNames = append(podNames, p.Pod.Name)
	}
	if err := deletePods(ctx, ns, podNames...); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range pods {
		for _, c := range p.Claims {
			if seen[string(c.UID)] {
				continue // a shared claim is unprepared once, when its last pod is gone
			}
			seen[string(c.UID)] = true
			if err := n.unprepare(ctx, c); err != nil {
				t.Errorf("unprepare claim %s: %v", c.Name, err)
			}
		}
	}
	n.checkClean(t)
}

// checkWholeGPUs checks that every full GPU the claims got is out of MIG mode once prepared: a
// GPU in MIG mode shows no CUDA device to a container that gets all of it.
func (n *TestNode) checkWholeGPUs(t *testing.T, claims []*resourceapi.ResourceClaim, pool map[string]resourceapi.Device) {
	t.Helper()
	st, err := n.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		for _, r := range c.Status.Allocation.Devices.Results {
			minor, mig := gpuMinor(pool[r.Device])
			if r.Driver != driverName || mig {
				continue
			}
			for _, g := range st.GPUs {
				if int64(g.Index) == minor && g.MIGEnabled {
					t.Errorf("claim %s got the whole GPU %s, prepared while the GPU is in MIG mode (issue 11, defect 6)", c.Name, r.Device)
				}
			}
		}
	}
}

// checkClean checks that the node holds no claim's state: no CDI spec, MIG instances and host
// settings as at start.
func (n *TestNode) checkClean(t *testing.T) {
	t.Helper()
	specs, err := n.CDISpecs()
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 0 {
		t.Errorf("CDI specs left after unprepare: %v", specs)
	}
	st, err := n.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// With dynamic MIG, MIG mode may stay on once the last instance is gone: the driver turns it
	// off when the whole GPU is prepared (checkWholeGPUs), not at unprepare.
	for i := range st.GPUs {
		st.GPUs[i].MIGEnabled = n.Baseline.GPUs[i].MIGEnabled
	}
	if diff := cmp.Diff(n.Baseline, st); diff != "" {
		t.Errorf("MIG instances or host settings after unprepare differ from the start (-start +now):\n%s", diff)
	}
}
