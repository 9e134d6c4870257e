package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
)

// The chart's release in the harness.
const (
	releaseName      = "gpu-dra-driver"
	releaseNamespace = "gpu-dra-driver"
	chartPath        = "deployments/helm/gpu-dra-driver"
	driverName       = "gpu.nvidia.com"
	// gpuNodeLabel is the chart's default node selector.
	gpuNodeLabel = "nvidia.com/gpu.present"
)

// suite is the cluster every test shares; TestMain sets it.
var suite *Suite

// Suite is the shared control plane, the installed chart and the driver binary.
type Suite struct {
	// Dir holds everything the run writes; sockets live below it, so it is short.
	Dir          string
	Repo         string
	CP           *framework.ControlPlane
	Client       kubernetes.Interface
	Applier      *framework.Applier
	Bins         *binaries.Set
	DriverBinary string
	// Values are the chart values the harness installs with.
	Values map[string]any
	// Objects are the chart's rendered objects, as applied.
	Objects   []*unstructured.Unstructured
	DaemonSet *appsv1.DaemonSet
	// ServiceAccount is the chart's ServiceAccount name (in releaseNamespace).
	ServiceAccount string

	mu      sync.Mutex
	drivers []*framework.Driver
	// atStop runs at teardown before the drivers stop (tests' own processes and loops).
	atStop []func()

	// The ComputeDomain tests' rack, built by the first of them (computeDomainRack).
	cdOnce sync.Once
	cdRack *cdRack
	cdErr  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(framework.Main(m, "e2e (control plane and chart)", func(ctx context.Context) (string, func(bool), error) {
		s, err := newSuite(ctx)
		if s == nil {
			return "", nil, err
		}
		suite = s
		return s.Dir, s.teardown, err
	}))
}

func newSuite(ctx context.Context) (*Suite, error) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	s := &Suite{Repo: repo}
	if s.Bins, err = binaries.Resolve(ctx); err != nil {
		return nil, err
	}
	if err := s.Bins.Build(ctx, os.Stdout, false); err != nil {
		return nil, err
	}
	// Sockets live below Dir: keep it short whatever TMPDIR is (unix socket paths <= 108 bytes).
	base := os.TempDir()
	if len(base) > 20 {
		base = "/tmp"
	}
	if s.Dir, err = os.MkdirTemp(base, "gde"); err != nil {
		return nil, err
	}
	if err := s.buildDriver(ctx); err != nil {
		return s, err
	}
	return s, s.startCluster(ctx, filepath.Join(s.Dir, "cp"))
}

// startCluster starts the suite's control plane in dir with opts and installs the chart.
func (s *Suite) startCluster(ctx context.Context, dir string, opts ...framework.ControlPlaneOption) error {
	var err error
	if s.CP, err = framework.StartControlPlane(ctx, s.Bins, dir, opts...); err != nil {
		return err
	}
	if s.Client, err = kubernetes.NewForConfig(s.CP.Admin); err != nil {
		return err
	}
	if s.Applier, err = framework.NewApplier(s.CP.Admin); err != nil {
		return err
	}
	return s.installChart(ctx)
}

// buildDriver builds the driver as `make build` does, fresh for every run.
func (s *Suite) buildDriver(ctx context.Context) error {
	s.DriverBinary = filepath.Join(s.Dir, "gpu-dra-driver")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", s.Repo, "build", "BIN="+s.DriverBinary)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make build: %w\n%s", err, out)
	}
	fmt.Printf("e2e: built gpu-dra-driver in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// installChart renders the chart as `helm install gpu-dra-driver -n gpu-dra-driver
// --set fakeMachine.name=...` would and applies it. The fake machine value makes the
// DaemonSet's arguments those of a node without GPUs; each test's driver then names its own
// machine with later flags. MPS daemons run in the driver's process (mpsDaemonPods false): this
// tier's kubelet is a fake that runs no pods, so a daemon pod would never start (the node tier,
// test/e2e/node, runs them).
func (s *Suite) installChart(ctx context.Context) error {
	s.Values = map[string]any{"fakeMachine": map[string]any{"name": "dgx-a100-40gb"}, "mpsDaemonPods": false}
	objs, err := framework.RenderChart(filepath.Join(s.Repo, chartPath), s.Bins.KubernetesVersion,
		framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: s.Values})
	if err != nil {
		return err
	}
	if err := framework.CreateNamespace(ctx, s.Client, releaseNamespace, nil); err != nil {
		return err
	}
	if err := s.Applier.Apply(ctx, releaseNamespace, objs...); err != nil {
		return err
	}
	s.Objects = objs
	if s.DaemonSet, err = framework.DaemonSetFrom(objs); err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			s.ServiceAccount = o.GetName()
		}
	}
	if s.ServiceAccount == "" {
		return fmt.Errorf("the chart renders no ServiceAccount")
	}
	return nil
}

func (s *Suite) track(d *framework.Driver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drivers = append(s.drivers, d)
}

// onTeardown registers f to run at teardown, after the tests (last registered first).
func (s *Suite) onTeardown(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.atStop = append(s.atStop, f)
}

// teardown stops every process; keep leaves the logs (not etcd's data) in Dir.
func (s *Suite) teardown(keep bool) {
	// The callbacks run unlocked: one may itself call onTeardown or track.
	s.mu.Lock()
	atStop := s.atStop
	s.mu.Unlock()
	for i := len(atStop) - 1; i >= 0; i-- {
		atStop[i]()
	}
	s.mu.Lock()
	drivers := s.drivers
	s.mu.Unlock()
	for _, d := range drivers {
		_ = d.Proc.Stop(5 * time.Second)
	}
	if s.CP != nil {
		s.CP.Stop()
	}
	if s.Dir == "" {
		return
	}
	if keep {
		_ = os.RemoveAll(filepath.Join(s.Dir, "cp", "etcd"))
		fmt.Printf("e2e: logs kept in %s (control plane: %s; drivers: %s)\n", s.Dir, filepath.Join(s.Dir, "cp", "logs"), filepath.Join(s.Dir, "logs"))
		return
	}
	_ = os.RemoveAll(s.Dir)
}

// gpuNodeLabels are the labels every harness GPU node carries.
func gpuNodeLabels(machine string) map[string]string {
	return map[string]string{gpuNodeLabel: "true", "gpudra.e2e/machine": machine}
}

// shortName makes a node or namespace name from parts, at most 20 characters (socket paths).
func shortName(parts ...string) string {
	n := strings.ToLower(strings.Join(parts, "-"))
	n = strings.NewReplacer(".", "", "_", "-", " ", "-").Replace(n)
	if len(n) > 20 {
		n = n[:20]
	}
	return strings.Trim(n, "-")
}
