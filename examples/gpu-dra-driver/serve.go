package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/sharing"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	var nf nodeFlags
	nf.register(fs)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	pluginDir := fs.String("plugin-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, gpudra.DefaultDriverName), "the plugin's directory for its DRA socket")
	registrarDir := fs.String("registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet's plugin registration directory")
	cdiRoot := fs.String("cdi-root", cdi.DefaultSpecDir, "where per-claim CDI specs are written")
	stateDir := fs.String("state-dir", "", "where the checkpoint lives (default: --plugin-dir)")
	driverRoot := fs.String("driver-root", "/", "root of the NVIDIA driver installation (/ or /run/nvidia/driver)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics on this address (e.g. :8080); empty: off")
	podUID := fs.String("pod-uid", os.Getenv("POD_UID"), "the plugin pod's UID (downward API): enables kubelet rolling updates")
	qps := fs.Float64("kube-api-qps", 200, "API client QPS; kubelet's helper GETs every claim before prepare, so a low limit delays pods")
	burst := fs.Int("kube-api-burst", 400, "API client burst")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	if *stateDir == "" {
		*stateDir = *pluginDir
	}
	client, err := kubeClient(*kubeconfig, float32(*qps), *burst)
	if err != nil {
		return err
	}
	for _, d := range []string{*pluginDir, *stateDir, *cdiRoot} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	n, err := nf.open(ctx)
	if err != nil {
		return err
	}
	defer n.close()

	root, err := cdi.NewHostRoot(*driverRoot)
	if err != nil {
		return err
	}
	inst, err := cdi.Discover(root)
	if err != nil {
		return fmt.Errorf("discover the NVIDIA driver under %s: %w", *driverRoot, err)
	}
	gen, err := cdi.NewGenerator(inst)
	if err != nil {
		return err
	}
	writer, err := cdi.NewWriter(cdi.WithSpecDir(*cdiRoot))
	if err != nil {
		return err
	}
	mgr := sharing.NewManager(gpudra.DefaultDriverName,
		sharing.WithTimeSlicer(sharing.NewNvidiaSMI(sharing.WithSMIDriverRoot(sharing.DriverRoot(*driverRoot)))),
		sharing.WithComputeModeSetter(sharing.NewNVMLComputeMode(n.nvml)),
		sharing.WithMPSDaemons(sharing.NewMPSControl(sharing.WithMPSDriverRoot(sharing.DriverRoot(*driverRoot)))),
		sharing.WithMPSRoot(filepath.Join(*pluginDir, "mps")),
	)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	plugin, err := draplugin.New(ctx, draplugin.Config{
		NodeName: nf.nodeName, NVML: n.nvml, Inventory: n.inv, StateDir: *stateDir,
		CDIGenerator: gen, CDIWriter: writer, Sharing: mgr, Slices: nf.builderOptions(n), Metrics: reg,
	})
	if err != nil {
		return err
	}
	report, err := plugin.Start(ctx, draplugin.StartConfig{KubeClient: client, RegistrarDir: *registrarDir,
		PluginDir: *pluginDir, RollingUpdatePodUID: types.UID(*podUID)})
	if err != nil {
		return err
	}
	defer plugin.Stop()
	logger.Info("Serving", "driver", plugin.DriverName(), "node", nf.nodeName, "gpus", len(n.inv.GPUs), "reconcile", report)
	fmt.Fprintf(stdout, "serving %s on node %s (%d GPUs); stop with SIGTERM\n", plugin.DriverName(), nf.nodeName, len(n.inv.GPUs))

	if *metricsAddr != "" {
		srv := &http.Server{Addr: *metricsAddr, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Metrics server stopped")
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	<-ctx.Done()
	logger.Info("Shutting down: prepared claims stay prepared")
	return nil
}

// kubeClient builds a client from a kubeconfig or the in-cluster configuration, with rate limits
// high enough that the kubelet-plugin helper's per-claim GETs do not queue.
func kubeClient(kubeconfig string, qps float32, burst int) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			err = fmt.Errorf("%w (outside a cluster, pass --kubeconfig)", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = "gpu-dra-driver"
	return kubernetes.NewForConfig(cfg)
}
