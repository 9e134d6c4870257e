package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/deviceplugin"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/mpspod"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

// serveFlags are the flags of `serve`.
type serveFlags struct {
	node         nodeFlags
	kubeconfig   string
	pluginDir    string
	registrarDir string
	cdiRoot      string
	stateDir     string
	hostRoot     string
	devRoot      string
	procRoot     string // the host's /proc: real mode's kernel-module files, passthrough
	metricsAddr  string
	podUID       string
	fakeControl  string
	fakeTmpfs    bool
	// mpsPods runs each MPS control daemon in a pod of its own (see mpsDaemonPods).
	mpsPods          bool
	mpsImage         string
	mpsNamespace     string
	mpsPriorityClass string
	strategies       string
	allowed          map[string]bool
	qps              float64
	burst            int
	// taintEffect and recovery configure health taints; allowDevicePlugin skips the guard
	// against a device plugin serving the same GPUs.
	taintEffect       string
	recovery          time.Duration
	allowDevicePlugin bool
	// negotiate asks the API server which optional ResourceSlice features it keeps.
	negotiate bool
	// passthrough publishes GPUs for virtual machines (passthrough.go).
	passthrough passthroughFlags
	fs          *pflag.FlagSet
}

func newServeCmd() *cobra.Command {
	s := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the kubelet plugin against a real API server",
		Long: `serve runs the kubelet plugin: it publishes the node's GPUs as ResourceSlices, registers with
kubelet and prepares claims (CDI specs, MIG instances, sharing) until SIGTERM. It drives the node's
real GPUs unless --nvml=fake asks for a fake machine (tests; then no NVIDIA driver is needed).
Every flag is checked before anything is created on the node.`,
		Example: `  gpu-dra-driver serve --kubeconfig ~/.kube/config --node-name worker-1
  gpu-dra-driver serve --node-name worker-1 --nvml=fake --machine l4x8 --kubeconfig ~/.kube/config \
      --plugin-dir /tmp/p --registrar-dir /tmp/r --cdi-root /tmp/cdi`,
		Args: noArgs,
	}
	s.register(cmd)
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		if err := s.complete(); err != nil {
			return err
		}
		return s.serve(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}

func (s *serveFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	s.fs = fs
	s.node.register(cmd, allNodeFlags...)
	s.node.registerMIGPublishing(cmd)
	// On a node, serve drives the real GPUs: a fake machine is only used when asked for.
	setDefault(fs, flagNVML, "real")
	setDefault(fs, flagNodeName, os.Getenv("NODE_NAME"))
	fs.Lookup(flagNodeName).Usage = "node name, also the pool name (default $NODE_NAME; required)"
	// Unlike the offline commands, serve changes the GPUs it drives.
	fs.Lookup(flagNVML).Usage = "NVML backend: real (libnvidia-ml: enumerates the node's GPUs and changes them for claims: creates and destroys MIG instances, sets compute modes) " +
		"or fake (an embedded fake machine, tests only)"
	fs.StringVar(&s.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	fs.StringVar(&s.pluginDir, "plugin-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, gpudra.DefaultDriverName), "the plugin's directory for its DRA socket")
	fs.StringVar(&s.registrarDir, "registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet's plugin registration directory")
	fs.StringVar(&s.cdiRoot, "cdi-root", cdi.DefaultSpecDir, "where per-claim CDI specs are written")
	fs.StringVar(&s.stateDir, "state-dir", "", "where the checkpoint lives (default: --plugin-dir)")
	fs.Lookup(flagDriverRoot).Usage = "root of the NVIDIA driver installation (/ or /run/nvidia/driver): NVML is loaded by its path in it and its tools run with its own dynamic loader; " +
		"with --nvml=fake the default is a fake installation under --state-dir, and a fake installation given here carries the fake kernel's /proc files"
	fs.StringVar(&s.hostRoot, "host-driver-root", "", "the driver root's path on the host, when this process sees it elsewhere (a container mounting the host's driver root at --driver-root); CDI specs name host paths (default: --driver-root)")
	fs.StringVar(&s.devRoot, "dev-root", "", "where the NVIDIA device nodes are, on the host as here (\"/\" when a driver container creates them in the host's /dev; default: --driver-root)")
	fs.StringVar(&s.procRoot, "proc-root", "/proc", "where the host's /proc is: with --nvml=real the NVIDIA kernel module's files are read there (driver version, device majors, MIG capability minors; "+
		"a fake machine's driver installation carries its own), and with --passthrough the processes that hold a GPU open (needs the host's PID namespace)")
	fs.StringVar(&s.metricsAddr, "metrics-addr", "", "serve Prometheus metrics (/metrics) and a liveness check through the plugin's sockets (/healthz) on this address, e.g. :8080; empty: off")
	fs.StringVar(&s.podUID, "pod-uid", os.Getenv("POD_UID"), "the plugin pod's UID (downward API): enables kubelet rolling updates")
	fs.StringVar(&s.fakeControl, "fake-control", "", "TESTS ONLY, --nvml=fake only: serve the fake machine's test controls (inject XIDs, mark GPUs healthy, list MIG instances) over HTTP on this loopback address (HOST:PORT) or unix socket (unix:/PATH)")
	fs.BoolVar(&s.fakeTmpfs, "fake-mps-tmpfs", false, "TESTS ONLY, --nvml=fake only: mount a real tmpfs on each MPS daemon's shm directory, as on a real node (needs CAP_SYS_ADMIN), so that its propagation to containers can be tested")
	fs.BoolVar(&s.mpsPods, "mps-daemon-pods", false, "run each MPS control daemon in a pod of its own on this node (image --mps-daemon-image, namespace --mps-daemon-namespace; needs create, get, list and delete on pods there), "+
		"so that restarting this plugin leaves the daemons and their workloads running; false runs them in this process's container, where they die with it")
	fs.StringVar(&s.mpsImage, "mps-daemon-image", "", "the image of the MPS daemon pods (--mps-daemon-pods): the plugin's own, whose gpu-dra-driver mps-daemon runs the daemon")
	fs.StringVar(&s.mpsNamespace, "mps-daemon-namespace", os.Getenv("POD_NAMESPACE"), "the namespace of the MPS daemon pods (--mps-daemon-pods; default $POD_NAMESPACE, the plugin's)")
	fs.StringVar(&s.mpsPriorityClass, "mps-daemon-priority-class", "", "the priority class of the MPS daemon pods (--mps-daemon-pods; the plugin's, e.g. system-node-critical)")
	fs.StringVar(&s.strategies, "sharing-strategies", strategyTimeSlicing+","+strategyMPS, "sharing strategies claims may ask for in their opaque config (comma-separated subset of TimeSlicing,MPS; empty: exclusive use only)")
	completeValues(cmd, "sharing-strategies", strategyTimeSlicing+","+strategyMPS, strategyTimeSlicing, strategyMPS, "")
	fs.Float64Var(&s.qps, "kube-api-qps", 200, "API client QPS; kubelet's helper GETs every claim before prepare, so a low limit delays pods")
	fs.IntVar(&s.burst, "kube-api-burst", 400, "API client burst")
	fs.StringVar(&s.taintEffect, "health-taint-effect", string(resourceapi.DeviceTaintEffectNoSchedule), "effect of the taint an unhealthy GPU gets (NoSchedule, NoExecute: also evict its pods, None: inform only)")
	completeValues(cmd, "health-taint-effect", string(resourceapi.DeviceTaintEffectNoSchedule), string(resourceapi.DeviceTaintEffectNoSchedule), string(resourceapi.DeviceTaintEffectNoExecute), string(resourceapi.DeviceTaintEffectNone))
	fs.DurationVar(&s.recovery, "health-recovery-window", draplugin.DefaultRecoveryWindow, "a GPU tainted for XIDs or ECC errors is untainted after this long without new ones (negative: only after an operator's action)")
	fs.BoolVar(&s.negotiate, "negotiate-features", true, "ask the API server at start (a dry-run ResourceSlice) which optional slice features it keeps and publish only those: "+
		"dynamic MIG, consumable memory and health taints are turned off, with one log line, where their feature gates are off; false publishes everything asked for")
	s.passthrough.register(fs)
	fs.BoolVar(&s.allowDevicePlugin, "allow-device-plugin", false, "publish GPUs even when the node reports nvidia.com/ resources from a device plugin (both would hand out the same GPUs)")
	// klog's verbosity is process-wide; serve exposes only -v of klog's flags (-v=2 and --v=2).
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	v := pflag.PFlagFromGoFlag(klogFlags.Lookup("v"))
	v.Usage = "log verbosity (klog); 2 logs every prepare and unprepare"
	fs.AddFlag(v)
}

// parseServeFlags parses and checks serve's flags as the command does.
func parseServeFlags(args []string) (*serveFlags, error) {
	cmd := &cobra.Command{Use: "serve"}
	s := &serveFlags{}
	s.register(cmd)
	if err := cmd.Flags().Parse(args); err != nil {
		return nil, usageError(err)
	}
	if cmd.Flags().NArg() > 0 {
		return nil, usageErrorf("serve takes no arguments, got %q", cmd.Flags().Args())
	}
	return s, s.complete()
}

// setDefault changes a registered flag's default value (and what --help prints).
func setDefault(fs *pflag.FlagSet, name, value string) {
	f := fs.Lookup(name)
	f.DefValue = value
	_ = f.Value.Set(value)
}

// complete checks the flags (usage errors) and fills in defaults that depend on others.
func (s *serveFlags) complete() error {
	if err := s.validate(); err != nil {
		return usageError(err)
	}
	if s.stateDir == "" {
		s.stateDir = s.pluginDir
	}
	return nil
}

// validate checks the flags before anything is created on the node.
func (s *serveFlags) validate() error {
	if s.node.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required: it names this node's pool and must be the Kubernetes node name")
	}
	fake := s.node.nvmlMode == "fake"
	for _, name := range []string{flagMachine, flagMIGConfig, "fake-control", "fake-mps-tmpfs"} {
		if changed(s.fs, name) && !fake {
			return fmt.Errorf("--%s needs --nvml=fake: serve uses the node's real GPUs unless a fake machine is asked for", name)
		}
	}
	if err := s.node.validate(); err != nil {
		return err
	}
	allowed, err := parseStrategies(s.strategies)
	if err != nil {
		return err
	}
	s.allowed = allowed
	if err := oneOf("health-taint-effect", s.taintEffect, string(resourceapi.DeviceTaintEffectNoSchedule), string(resourceapi.DeviceTaintEffectNoExecute), string(resourceapi.DeviceTaintEffectNone)); err != nil {
		return err
	}
	if err := s.validateAddrs(); err != nil {
		return err
	}
	if err := s.validateMPSPods(); err != nil {
		return err
	}
	if !(s.qps > 0) || math.IsInf(s.qps, 0) || s.burst <= 0 { // !(> 0) also refuses NaN
		return fmt.Errorf("--kube-api-qps=%v --kube-api-burst=%d: both must be positive numbers", s.qps, s.burst)
	}
	return s.validateDirs()
}

// validateMPSPods checks the MPS daemon pod flags: with --mps-daemon-pods an image and a
// namespace are needed; without, the other flags would do nothing.
func (s *serveFlags) validateMPSPods() error {
	if !s.mpsPods {
		for _, name := range []string{"mps-daemon-image", "mps-daemon-priority-class"} {
			if changed(s.fs, name) {
				return fmt.Errorf("--%s needs --mps-daemon-pods", name)
			}
		}
		return nil
	}
	if s.mpsImage == "" || s.mpsNamespace == "" {
		return fmt.Errorf("--mps-daemon-pods needs --mps-daemon-image and --mps-daemon-namespace (or $POD_NAMESPACE), got %q and %q", s.mpsImage, s.mpsNamespace)
	}
	return nil
}

// validateAddrs checks the addresses serve listens on: the fake control endpoint and metrics.
func (s *serveFlags) validateAddrs() error {
	if s.fakeControl != "" {
		if err := controlAddr(s.fakeControl); err != nil {
			return fmt.Errorf("--fake-control=%q: %w", s.fakeControl, err)
		}
	}
	if s.metricsAddr != "" {
		_, port, err := net.SplitHostPort(s.metricsAddr)
		if err == nil {
			_, err = net.LookupPort("tcp", port)
		}
		if err != nil {
			return fmt.Errorf("--metrics-addr=%q: want HOST:PORT or :PORT, the port a number up to 65535 or a service name: %w", s.metricsAddr, err)
		}
	}
	return nil
}

// validateDirs checks that the directory flags are absolute paths; the optional ones may be empty.
func (s *serveFlags) validateDirs() error {
	for _, name := range []string{"plugin-dir", "registrar-dir", "cdi-root", "driver-root", "state-dir", "host-driver-root", "dev-root", "proc-root"} {
		dir := s.fs.Lookup(name).Value.String()
		optional := name == "state-dir" || name == "host-driver-root" || name == "dev-root"
		if (dir != "" || !optional) && !filepath.IsAbs(dir) {
			return fmt.Errorf("--%s=%q: must be an absolute path", name, dir)
		}
	}
	return nil
}

// serve loads the API client configuration, opens the node and checks the flags that depend on
// it before it creates directories, then starts the plugin and serves until ctx ends.
func (s *serveFlags) serve(ctx context.Context, stdout, stderr io.Writer) error {
	logger := klog.FromContext(ctx)
	// The chart may set --dynamic-mig and --consumable-memory for a cluster of mixed nodes: on a
	// node's MIG-capable GPUs dynamic MIG wins, said once here rather than refused.
	s.node.warn = func(msg string) {
		logger.Info("WARNING: " + msg)
		fmt.Fprintf(stderr, "WARNING: %s\n", msg)
	}
	// A GPU that fails to enumerate is left out, with a warning; the node's others serve.
	s.node.skipFailedGPUs = true
	// Everything is checked before anything is created on the node: the directories, the API
	// client configuration, the GPUs and the flags that depend on them, the API server and the
	// Node.
	if s.node.migConfig != "" {
		if _, _, err := loadMIGConfig(ctx, s.node.migConfig); err != nil {
			return usageErrorf("--mig-config: %w", err)
		}
	}
	if err := checkDirs(map[string]string{"plugin-dir": s.pluginDir, "state-dir": s.stateDir, "cdi-root": s.cdiRoot, "registrar-dir": s.registrarDir}); err != nil {
		return err
	}
	if s.allowed[strategyMPS] {
		// MPS daemons keep their control sockets below the plugin directory.
		if err := sharing.CheckMPSRoot(filepath.Join(s.pluginDir, "mps")); err != nil {
			return usageErrorf("--plugin-dir=%q: %w; or leave MPS out of --sharing-strategies", s.pluginDir, err)
		}
	}
	client, err := kubeClient(ctx, s.kubeconfig, float32(s.qps), s.burst)
	if err != nil {
		return err
	}
	n, err := s.node.open(ctx)
	if err != nil {
		return err
	}
	defer n.close()
	if err := s.checkDriverRoot(ctx, n); err != nil {
		return err
	}
	if err := checkAPIServer(ctx, client); err != nil {
		return err
	}
	if err := s.guardDevicePlugin(ctx, client); err != nil {
		return err
	}
	for _, d := range []string{s.pluginDir, s.stateDir, s.cdiRoot, s.registrarDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if n.machine != nil {
		logger.Info("WARNING: serving a FAKE GPU machine (--nvml=fake): the devices published for this node do not exist", "machine", s.node.machine, "migConfig", s.node.migConfig)
		fmt.Fprintf(stderr, "WARNING: gpu-dra-driver serve is publishing the FAKE machine %q for node %s; its devices do not exist\n", s.node.machine, s.node.nodeName)
	}
	plugin, reg, err := s.newPlugin(ctx, n, client)
	if err != nil {
		return err
	}
	if s.fakeControl != "" {
		stop, err := serveHTTP(ctx, "fake-control", s.fakeControl, newFakeControl(n.machine, n.host, plugin, n.inv))
		if err != nil {
			return err
		}
		defer stop()
	}
	return s.run(ctx, plugin, reg, client, n, stdout)
}

func (s *serveFlags) run(ctx context.Context, plugin *draplugin.Plugin, reg *prometheus.Registry, client kubernetes.Interface, n *node, stdout io.Writer) error {
	logger := klog.FromContext(ctx)
	report, err := plugin.Start(ctx, draplugin.StartConfig{KubeClient: client, RegistrarDir: s.registrarDir,
		PluginDir: s.pluginDir, RollingUpdatePodUID: types.UID(s.podUID)})
	if err != nil && ctx.Err() != nil {
		// Stopped while starting (SIGTERM): a shutdown, not a failure.
		logger.Info("Shutting down before serving", "cause", context.Cause(ctx).Error())
		return nil
	}
	if err != nil {
		return err
	}
	defer plugin.Stop()
	logger.Info("Serving", "driver", plugin.DriverName(), "node", s.node.nodeName, "gpus", len(n.inv.GPUs), "reconcile", report)
	fmt.Fprintf(stdout, "serving %s on node %s (%d GPUs); stop with SIGTERM\n", plugin.DriverName(), s.node.nodeName, len(n.inv.GPUs))

	if s.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("/healthz", newSocketHealth(s.registrarDir, plugin.DriverName(), s.podUID))
		stop, err := serveHTTP(ctx, "metrics", s.metricsAddr, mux)
		if err != nil {
			return err
		}
		defer stop()
	}
	select {
	case <-ctx.Done():
		logger.Info("Shutting down: prepared claims stay prepared")
		return nil
	case <-plugin.Done():
		// A fatal error (the DRA or registration gRPC server failed) ended the plugin's loops:
		// exit, so that the pod is restarted, rather than serve on half dead.
		return fmt.Errorf("the plugin failed and must be restarted: %w", plugin.Err())
	}
}

// negotiateFeatures asks the API server which optional ResourceSlice features it keeps
// (--negotiate-features), retrying one that does not answer for about half a minute; nil
// without the flag. A server that cannot be asked is an error: publishing blind could lose
// fields unnoticed (dynamic MIG partitions without their counters), so serve exits and is
// restarted rather than guessing.
func (s *serveFlags) negotiateFeatures(ctx context.Context, client kubernetes.Interface, n *node) (*draplugin.APIFeatures, error) {
	if !s.negotiate {
		return nil, nil
	}
	driver := gpudra.NewBuilder(s.node.builderOptions(n)...).DriverName()
	f, err := draplugin.NegotiateFeatures(ctx, client, driver, s.node.nodeName)
	if err != nil {
		return nil, fmt.Errorf("%w (--negotiate-features=false publishes without asking)", err)
	}
	return f, nil
}

// checkDriverRoot discovers a real driver root (as newPlugin does) before anything is created; a
// fake machine's driver root is laid out later, in --state-dir.
func (s *serveFlags) checkDriverRoot(ctx context.Context, n *node) error {
	if n.machine != nil && !changed(s.fs, "driver-root") {
		return nil
	}
	root, err := s.driverRootFor(ctx, n)
	if err != nil {
		return err
	}
	if _, err := cdi.Discover(root); err != nil {
		return fmt.Errorf("discover the NVIDIA driver under %s: %w", s.node.driverRoot, err)
	}
	return nil
}

// newPlugin wires the plugin core to the node: CDI generation from the driver root, sharing
// through the host's tools, metrics, and, once the node is known to be usable, the ResourceSlice
// features the API server keeps.
func (s *serveFlags) newPlugin(ctx context.Context, n *node, client kubernetes.Interface) (*draplugin.Plugin, *prometheus.Registry, error) {
	root, err := s.driverRootFor(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	inst, err := cdi.Discover(root)
	if err != nil {
		return nil, nil, fmt.Errorf("discover the NVIDIA driver under %s: %w", s.node.driverRoot, err)
	}
	gen, err := cdi.NewGenerator(inst)
	if err != nil {
		return nil, nil, err
	}
	writer, err := cdi.NewWriter(cdi.WithSpecDir(s.cdiRoot))
	if err != nil {
		return nil, nil, err
	}
	actions, err := s.hostActions(n, client)
	if err != nil {
		return nil, nil, err
	}
	mgr := sharing.NewManager(gpudra.DefaultDriverName, append(actions, sharing.WithMPSRoot(filepath.Join(s.pluginDir, "mps")))...)
	features, err := s.negotiateFeatures(ctx, client, n)
	if err != nil {
		return nil, nil, err
	}
	pt, err := s.passthrough.setup(ctx, n.inv, n.machine != nil, s.stateDir, s.procRoot)
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	plugin, err := draplugin.New(ctx, draplugin.Config{
		NodeName: s.node.nodeName, NVML: n.nvml, Inventory: n.inv, StateDir: s.stateDir, Passthrough: pt.binder,
		CDIGenerator: gen, CDIWriter: writer, Sharing: mgr, SliceOptions: append(s.node.builderOptions(n), pt.options...), Metrics: reg, APIFeatures: features,
		Health: draplugin.HealthConfig{TaintEffect: resourceapi.DeviceTaintEffect(s.taintEffect), RecoveryWindow: s.recovery},
	})
	if err != nil {
		return nil, nil, err
	}
	return plugin, reg, nil
}

// hostActions are the host tools sharing drives: compute modes through NVML, time slices
// and MPS control daemons through the driver's nvidia-smi and nvidia-cuda-mps-control. On a
// fake machine, time slices and daemons are recorded by a fake host (n.host) kept in a file in
// the state directory, which also learns the compute modes NVML sets (its MPS daemons need
// EXCLUSIVE_PROCESS, as real ones do).
func (s *serveFlags) hostActions(n *node, client kubernetes.Interface) ([]sharing.Option, error) {
	var cm sharing.ComputeModeSetter = sharing.NewNVMLComputeMode(n.nvml)
	var ts sharing.TimeSlicer
	var mps sharing.MPSDaemons
	if n.machine != nil {
		// GPUs only: the fake host takes any MIG device, and its state file then stays valid
		// when the fake machine's MIG layout changes between two runs (a chart upgrade).
		var uuids []string
		for _, g := range n.inv.GPUs {
			uuids = append(uuids, g.UUID)
		}
		// Kept in a file, like a real host's settings outlive the plugin process (restarts,
		// the two pods of a rolling update).
		host, err := sharingtest.OpenFakeHost(filepath.Join(s.stateDir, "fake-host.json"), uuids...)
		if err != nil {
			return nil, fmt.Errorf("fake host: %w", err)
		}
		n.host = host
		cm = recordedComputeMode{ComputeModeSetter: cm, host: n.host}
		dirs := fakeMPSDirs{MPSDaemons: n.host}
		if s.fakeTmpfs {
			dirs.mounter = sharing.NewTmpfsMounter()
		}
		ts, mps = n.host, dirs
	} else {
		ts = sharing.NewNvidiaSMI(sharing.WithSMIDriverRoot(sharing.DriverRootDir(s.node.driverRoot)))
		mps = sharing.NewMPSControl(sharing.WithMPSDriverRoot(sharing.DriverRootDir(s.node.driverRoot)))
	}
	if s.mpsPods {
		pods, err := s.mpsDaemonPods(n, client)
		if err != nil {
			return nil, err
		}
		mps = pods
	}
	ts, mps = restrictStrategies(s.allowed, s.strategies, ts, mps)
	return []sharing.Option{sharing.WithComputeModeSetter(cm), sharing.WithTimeSlicer(ts), sharing.WithMPSDaemons(mps)}, nil
}

// recordedComputeMode sets compute modes through NVML (the fake machine's) and records each
// change in the fake host.
type recordedComputeMode struct {
	sharing.ComputeModeSetter
	host *sharingtest.FakeHost
}

func (r recordedComputeMode) SetComputeMode(ctx context.Context, uuid string, mode sharing.ComputeMode) error {
	if err := r.ComputeModeSetter.SetComputeMode(ctx, uuid, mode); err != nil {
		return err
	}
	r.host.SetComputeModeState(uuid, mode)
	return nil
}

// fakeMPSDirs gives the fake host's MPS daemons the directories a real daemon's setup creates
// (pipe, log and shm, with the same modes) and removes them when the daemon stops: containers
// bind-mount them, so on a real node a fake machine's MPS claims need them as real ones do. With
// a mounter (--fake-mps-tmpfs) the shm directory gets its tmpfs as on a real node; without, the
// tmpfs stays recorded, not mounted.
type fakeMPSDirs struct {
	sharing.MPSDaemons
	mounter sharing.Mounter
}

func (f fakeMPSDirs) Start(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := spec.CreateDirs(); err != nil {
		return err
	}
	if f.mounter != nil {
		size := spec.ShmSizeBytes
		if size == 0 {
			size = sharing.DefaultMPSShmSize
		}
		if err := f.mounter.Mount(ctx, spec.ShmDir, size); err != nil {
			return err
		}
	}
	return f.MPSDaemons.Start(ctx, spec)
}

func (f fakeMPSDirs) Stop(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := f.MPSDaemons.Stop(ctx, spec); err != nil {
		return err
	}
	return f.removeDirs(ctx, spec)
}

// removeDirs unmounts the shm tmpfs (when mounted) and removes the daemon's directories.
func (f fakeMPSDirs) removeDirs(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if f.mounter != nil {
		if err := f.mounter.Unmount(ctx, spec.ShmDir); err != nil {
			return err
		}
	}
	return spec.RemoveDirs(klog.FromContext(ctx))
}

// driverRootFor returns the driver installation CDI specs are generated from. A fake machine
// gets a fake installation (device nodes, libraries, /proc files) under the state directory,
// unless --driver-root names one: it needs no NVIDIA kernel module or driver on the host.
func (s *serveFlags) driverRootFor(ctx context.Context, n *node) (cdi.DriverRoot, error) {
	if n.machine == nil || changed(s.fs, "driver-root") {
		var opts []cdi.HostRootOption
		if s.hostRoot != "" {
			opts = append(opts, cdi.WithHostDriverRoot(s.hostRoot))
		}
		if s.devRoot != "" {
			opts = append(opts, cdi.WithDevRoot(s.devRoot), cdi.WithHostDevRoot(s.devRoot))
		}
		if n.machine != nil {
			// A fake installation carries the fake kernel's /proc files (driver version,
			// device majors, MIG capability minors): the host's /proc has none of them.
			opts = append(opts, cdi.WithProcRoot(s.node.driverRoot))
		} else {
			// --proc-root: the host kernel's /proc, where the NVIDIA module's files are.
			opts = append(opts, cdi.WithProcDir(s.procRoot))
		}
		return cdi.NewHostRoot(s.node.driverRoot, opts...)
	}
	dir := filepath.Join(s.stateDir, "fake-driver-root")
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("reset the fake driver root %s: %w", dir, err)
	}
	root, err := cditest.Build(dir, cditest.Layout{GPUs: len(n.inv.GPUs)})
	if err != nil {
		return nil, fmt.Errorf("lay out a fake driver root in %s: %w", dir, err)
	}
	klog.FromContext(ctx).Info("Using a fake NVIDIA driver installation for the fake machine", "dir", dir)
	return root, nil
}

// serveHTTP serves h on addr until ctx ends or the returned stop function is called.
func serveHTTP(ctx context.Context, what, addr string, h http.Handler) (func(), error) {
	logger := klog.FromContext(ctx)
	ln, err := listen(addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener on %s: %w", what, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP server stopped", "server", what)
		}
	}()
	logger.Info("Serving HTTP", "server", what, "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// kubeClient builds a client from a kubeconfig or the in-cluster configuration, with rate limits
// high enough that the kubelet-plugin helper's per-claim GETs do not queue.
func kubeClient(ctx context.Context, kubeconfig string, qps float32, burst int) (kubernetes.Interface, error) {
	cfg, err := restConfig(ctx, kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = "gpu-dra-driver"
	return kubernetes.NewForConfig(cfg)
}

// guardDevicePlugin refuses to publish the node's GPUs when its Node reports NVIDIA device
// plugin resources: the device plugin and this driver would give the same GPUs to two pods.
func (s *serveFlags) guardDevicePlugin(ctx context.Context, client kubernetes.Interface) error {
	if s.allowDevicePlugin {
		return nil
	}
	node, err := client.CoreV1().Nodes().Get(ctx, s.node.nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read node %s to check for a GPU device plugin: %w", s.node.nodeName, err)
	}
	if err := deviceplugin.CheckNode(node); err != nil {
		return fmt.Errorf("%w (remove the device plugin from this node first, or pass --allow-device-plugin)", err)
	}
	return nil
}

// mpsDaemonPods returns the MPS daemons of --mps-daemon-pods: one pod per daemon on this node,
// running this image's `gpu-dra-driver mps-daemon` with the daemon's spec. On real GPUs the pod
// is privileged with the host's PID namespace and gets the driver root; on a fake machine it
// runs a fake control daemon (mps-daemon --fake), unprivileged, and the fake host still records
// the daemon, as without pods.
func (s *serveFlags) mpsDaemonPods(n *node, client kubernetes.Interface) (sharing.MPSDaemons, error) {
	cfg := mpspod.Config{Client: client, Namespace: s.mpsNamespace, NodeName: s.node.nodeName, Image: s.mpsImage,
		PriorityClassName: s.mpsPriorityClass}
	hostRoot := s.node.driverRoot
	if s.hostRoot != "" {
		hostRoot = s.hostRoot
	}
	if n.machine == nil {
		cfg.DriverRoot, cfg.Args = hostRoot, []string{"--" + flagDriverRoot + "=/driver-root"}
		cfg.Privileged, cfg.HostPID = true, true
	} else {
		cfg.Args = []string{"--fake"}
		if !s.fakeTmpfs {
			cfg.Mounter = n.host // recorded, not mounted
		}
	}
	pods, err := mpspod.New(cfg)
	if err != nil {
		return nil, err
	}
	if n.machine == nil {
		return pods, nil
	}
	return recordedMPS{MPSDaemons: pods, host: n.host}, nil
}

// recordedMPS runs a fake machine's MPS daemons in pods and records them in the fake host too,
// so that its state (GET /state, the state file) shows them as without pods.
type recordedMPS struct {
	sharing.MPSDaemons
	host *sharingtest.FakeHost
}

func (r recordedMPS) Start(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := r.MPSDaemons.Start(ctx, spec); err != nil {
		return err
	}
	return r.host.Start(ctx, spec)
}

func (r recordedMPS) Stop(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	if err := r.MPSDaemons.Stop(ctx, spec); err != nil {
		return err
	}
	return r.host.Stop(ctx, spec)
}
