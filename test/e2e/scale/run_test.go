package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// namespace holds the claims and pods.
const namespace = "scale"

// workers is how many requests the set-up sends at once.
const workers = 16

// cluster is one run's control plane and its client.
type cluster struct {
	bins   *binaries.Set
	cp     *framework.ControlPlane
	client kubernetes.Interface
}

// run is one whole measurement of kind k: a fresh control plane, nodes, slices, claims and
// pods, then the scheduler: sched's kube-scheduler (the cluster's own when sched.set is nil),
// the row's kind being k's name with sched's suffix.
func run(ctx context.Context, tb testing.TB, k kind, sched scheduler, nodes, pods int) (result, error) {
	row := result{kind: k.name + sched.suffix, nodes: nodes, pods: pods}
	c, err := startCluster(ctx, tb)
	if err != nil {
		return row, err
	}
	defer c.cp.Stop()
	start := time.Now()
	if err := c.createNodes(ctx, nodes); err != nil {
		return row, err
	}
	if row.devicesPerNode, row.slicesPerNode, err = c.publishSlices(ctx, k, nodes); err != nil {
		return row, err
	}
	if k.upstream {
		if err := c.prefillUpstream(ctx, nodes); err != nil {
			return row, err
		}
		row.prefilled = nodes * upstreamDevices / 2
	}
	if err := c.createPods(ctx, k, pods); err != nil {
		return row, err
	}
	row.setup = time.Since(start)
	w, err := watchBinds(ctx, c.client, pods)
	if err != nil {
		return row, err
	}
	defer w.stop()
	schedStart := time.Now()
	schedBins := c.bins
	if sched.set != nil {
		schedBins = sched.set
	}
	if err := c.cp.StartScheduler(ctx, schedBins); err != nil {
		return row, err
	}
	cpu := &cpuMeter{procs: []*framework.Process{c.cp.Process(binaries.KubeScheduler), c.cp.Process(binaries.KubeAPIServer),
		c.cp.Process(binaries.Etcd), c.cp.Process(binaries.KubeControllerManager)}}
	var profile <-chan error
	binds, err := w.wait(ctx, c.cp.Process(binaries.KubeScheduler), func() {
		cpu.begin()
		profile = c.profileScheduler(ctx, tb, row.kind)
	})
	if err != nil {
		return row, fmt.Errorf("%s: %w; scheduler log %s", row.kind, err, c.cp.Process(binaries.KubeScheduler).LogFile)
	}
	cpu.end()
	row.binds, row.schedulerStart = binds, schedStart
	row.schedulerCPU, row.apiserverCPU, row.etcdCPU, row.controllerCPU = cpu.use[0], cpu.use[1], cpu.use[2], cpu.use[3]
	row.scheduler, _ = c.cp.Process(binaries.KubeScheduler).Usage()
	row.apiserver, _ = c.cp.Process(binaries.KubeAPIServer).Usage()
	if profile != nil {
		if err := <-profile; err != nil {
			tb.Logf("scheduler CPU profile: %v", err)
		}
	}
	if err := c.checkAllocated(ctx, pods); err != nil {
		return row, err
	}
	if k.upstream {
		return row, c.checkExclusive(ctx)
	}
	return row, nil
}

// startCluster starts a control plane whose scheduler waits for StartScheduler, in a fresh
// directory removed at the end of the benchmark (unless -scale.keep).
func startCluster(ctx context.Context, tb testing.TB) (*cluster, error) {
	bins, err := binaries.Resolve(ctx)
	if err != nil {
		return nil, err
	}
	if err := bins.Build(ctx, io.Discard, false); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpudra-scale")
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() {
		if *keepFlag || tb.Failed() {
			tb.Logf("run directory kept: %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	qps := strconv.Itoa(*schedulerQPS)
	cp, err := framework.StartControlPlane(ctx, bins, dir, framework.WithDeferredScheduler(),
		framework.WithSchedulerFlags("--kube-api-qps="+qps, "--kube-api-burst="+qps))
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(cp.Admin)
	cfg.QPS, cfg.Burst = 2000, 4000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		cp.Stop()
		return nil, err
	}
	for _, dc := range append(selectors.DeviceClasses(""), upstreamDeviceClass()) {
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			cp.Stop()
			return nil, fmt.Errorf("create DeviceClass %s: %w", dc.Name, err)
		}
	}
	if err := framework.CreateNamespace(ctx, client, namespace, nil); err != nil {
		cp.Stop()
		return nil, err
	}
	return &cluster{bins: bins, cp: cp, client: client}, nil
}

func nodeName(i int) string { return fmt.Sprintf("gpu-node-%04d", i) }

// parallel calls f(0..n-1) from a few goroutines and returns the first error.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error { return f(ctx, i) })
	}
	return g.Wait()
}

func (c *cluster) createNodes(ctx context.Context, n int) error {
	labels := map[string]string{"nvidia.com/gpu.present": "true"}
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		_, err := framework.CreateReadyNode(ctx, c.client, nodeName(i), labels)
		return err
	})
}

// publishSlices publishes, for every node, the slices gpudra builds for the fake machine with
// the kind's options (PCIe roots from the fake's topology, as serve does), or upstream's basic
// slice for upstream-basic, and returns the devices and slices of one node.
func (c *cluster) publishSlices(ctx context.Context, k kind, n int) (devices, slices int, err error) {
	if k.upstream {
		err := parallel(ctx, n, func(ctx context.Context, i int) error {
			_, err := c.client.ResourceV1().ResourceSlices().Create(ctx, upstreamSlice(i), metav1.CreateOptions{})
			return err
		})
		return upstreamDevices, 1, err
	}
	m, err := gputest.New(machine, k.machineOpts...)
	if err != nil {
		return 0, 0, err
	}
	inv, err := nvmlgpu.Enumerate(ctx, m)
	if err != nil {
		return 0, 0, err
	}
	topo, err := nvmltopology.Discover(m, nvmltopology.WithoutSysfs())
	if err != nil {
		return 0, 0, err
	}
	b := gpudra.NewBuilder(append([]gpudra.Option{gpudra.WithPCIeRoot(topo.PCIeRoot)}, k.builderOpts...)...)
	pool, err := b.Build(nodeName(0), inv)
	if err != nil {
		return 0, 0, err
	}
	for _, s := range pool.Slices {
		devices += len(s.Devices)
	}
	err = parallel(ctx, n, func(ctx context.Context, i int) error {
		objs, err := gpudra.ResourceSlices(b.DriverName(), nodeName(i), &gpudra.Pool{Name: nodeName(i), Slices: pool.Slices})
		if err != nil {
			return err
		}
		for _, s := range objs {
			if _, err := c.client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create ResourceSlice %s: %w", s.Name, err)
			}
		}
		return nil
	})
	return devices, len(pool.Slices), err
}

// createPods creates n claims of kind k and n pods, each using its own claim.
func (c *cluster) createPods(ctx context.Context, k kind, n int) error {
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("c%05d", i)
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{k.request()}}},
		}
		if _, err := c.client.ResourceV1().ResourceClaims(namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create claim %s: %w", name, err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%05d", i)},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "ctr", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}},
			},
		}
		if _, err := c.client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
		return nil
	})
}

// checkAllocated checks that the scheduler allocated every claim, each on the node of its pod.
func (c *cluster) checkAllocated(ctx context.Context, n int) error {
	claims, err := c.client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	allocated := 0
	for _, cl := range claims.Items {
		if cl.Status.Allocation != nil && len(cl.Status.ReservedFor) == 1 {
			allocated++
		}
	}
	if allocated != n {
		return fmt.Errorf("%d of %d claims are allocated and reserved after every pod was bound", allocated, n)
	}
	return nil
}

// profileScheduler fetches a CPU profile of kube-scheduler for the next 30 s (from the first
// bind on) when -scale.cpuprofile is set; the channel yields the outcome.
func (c *cluster) profileScheduler(ctx context.Context, tb testing.TB, name string) <-chan error {
	out := make(chan error, 1)
	if *cpuProfile == "" {
		out <- nil
		return out
	}
	go func() { out <- c.fetchProfile(ctx, filepath.Join(*cpuProfile, "kube-scheduler-"+name+".pprof")) }()
	tb.Logf("profiling kube-scheduler into %s", *cpuProfile)
	return out
}

func (c *cluster) fetchProfile(ctx context.Context, path string) error {
	cfg := rest.CopyConfig(c.cp.Admin)
	// The scheduler serves with a self-signed certificate; the admin client certificate
	// authorizes the request.
	cfg.TLSClientConfig.Insecure, cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.CAData = true, "", nil
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cp.SchedulerURL()+"/debug/pprof/profile?seconds=30", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
