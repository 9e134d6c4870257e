package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// pluginOptions are the flags of the plugin command.
type pluginOptions struct {
	kubeconfig, nodeName, podUID                       string
	cdiRoot, stateDir, pluginDir, registrarDir         string
	devRoot, procDevices, nvml, driverRoot, fakeClique string
	readyTimeout                                       time.Duration
	channelCount                                       int
}

func newPluginCmd(work workFunc) *cobra.Command {
	o := &pluginOptions{}
	dir := filepath.Join(kubeletplugin.KubeletPluginsDir, computedomain.DriverName)
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "run the kubelet plugin of IMEX channels and daemons until SIGTERM",
		Long: `plugin publishes the node's IMEX channel (channel-0) and daemon (daemon-0) devices when its
GPUs' NVLink fabric info puts it in a clique, and prepares them for the claims of
ComputeDomains: a channel once the node's IMEX daemon is ready, the daemon's directory for the
daemon pod. It reads the GPUs through NVML (--nvml=real, from --driver-root) or, for tests, a
fake GB200 tray (--nvml=fake) whose GPUs report --fake-clique.`,
		Args: cobra.NoArgs,
		RunE: work(func(cmd *cobra.Command) error { return o.run(cmd.Context()) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "node name, also the pool name (default $NODE_NAME)")
	f.StringVar(&o.podUID, "pod-uid", os.Getenv("POD_UID"), "the plugin pod's UID, for kubelet's rolling-update registration (default $POD_UID)")
	f.StringVar(&o.cdiRoot, "cdi-root", cdi.DefaultSpecDir, "where per-claim CDI specs are written")
	f.StringVar(&o.stateDir, "state-dir", dir, "the checkpoint and the IMEX daemons' directories (a host path, mounted at the same path)")
	f.StringVar(&o.pluginDir, "plugin-dir", dir, "the plugin's directory for its DRA socket")
	f.StringVar(&o.registrarDir, "registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet's plugin registration directory")
	f.StringVar(&o.devRoot, "dev-root", nodeplugin.DefaultDevRoot, "the host's /dev, where IMEX channel device nodes are made")
	f.StringVar(&o.procDevices, "proc-devices", nodeplugin.DefaultProcDevices, "the host's /proc/devices, which gives the channels' major number")
	f.StringVar(&o.nvml, "nvml", "real", "real: the node's GPUs through NVML; fake: a fake GB200 tray (tests)")
	f.StringVar(&o.driverRoot, "driver-root", "/", "where the NVIDIA driver's files are (NVML is loaded from there)")
	f.StringVar(&o.fakeClique, "fake-clique", "", `with --nvml=fake: the fake tray's clique, "<cluster UUID>.<clique ID>", or "none" for GPUs in no clique`)
	f.DurationVar(&o.readyTimeout, "ready-timeout", nodeplugin.DefaultReadyTimeout, "how long a channel prepare waits for the node's IMEX daemon before kubelet retries")
	f.IntVar(&o.channelCount, "channel-count", nodeplugin.DefaultChannelCount, "channels a claim in allocationMode All gets")
	return cmd
}

func (o *pluginOptions) run(ctx context.Context) error {
	fabric, closeNVML, err := o.fabric()
	if err != nil {
		return err
	}
	defer closeNVML()
	rc, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	scheme, err := nodeplugin.NewScheme()
	if err != nil {
		return err
	}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	driver, err := nodeplugin.New(nodeplugin.Config{NodeName: o.nodeName, StateDir: o.stateDir, Fabric: fabric,
		Domains: nodeplugin.NewClientDomains(c), Channels: nodeplugin.NewHostChannels(o.devRoot, o.procDevices),
		ReadyTimeout: o.readyTimeout, ChannelCount: o.channelCount})
	if err != nil {
		return &usageError{err: err}
	}
	writer, err := cdi.NewWriter(cdi.WithSpecDir(o.cdiRoot), cdi.WithWriterKind(computedomain.DriverName, "claim"))
	if err != nil {
		return err
	}
	plugin, err := exclusive.New(ctx, exclusive.Config{DriverName: computedomain.DriverName, NodeName: o.nodeName,
		Driver: driver, StateDir: o.stateDir, CDIWriter: writer})
	if err != nil {
		return err
	}
	report, err := plugin.Start(ctx, exclusive.StartConfig{KubeClient: clientset, PluginDir: o.pluginDir,
		RegistrarDir: o.registrarDir, RollingUpdatePodUID: types.UID(o.podUID)})
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting: a shutdown, not a failure
	}
	if err != nil {
		return err
	}
	defer plugin.Stop()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go driver.WatchFabric(watchCtx, nodeplugin.DefaultFabricPoll, plugin.Publish)
	klog.FromContext(ctx).Info("Serving", "driver", computedomain.DriverName, "node", o.nodeName, "reconciled", report.String())
	select {
	case <-ctx.Done():
		return nil
	case <-plugin.Done():
		return plugin.Err()
	}
}

// fabric returns the node's GPU fabric source and what closes NVML.
func (o *pluginOptions) fabric() (nodeplugin.Fabric, func(), error) {
	var sess *nvmlgpu.Session
	switch o.nvml {
	case "real":
		if o.fakeClique != "" {
			return nil, nil, usageErrorf("--fake-clique needs --nvml=fake")
		}
		s, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(o.driverRoot))
		if err != nil {
			return nil, nil, fmt.Errorf("NVML: %w", err)
		}
		sess = s
	case "fake":
		opts, err := fakeFabric(o.fakeClique)
		if err != nil {
			return nil, nil, err
		}
		m, err := gputest.New("gb200-nvl4", opts...)
		if err != nil {
			return nil, nil, &usageError{err: err}
		}
		if sess, err = nvmlgpu.Open(m); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, usageErrorf("--nvml %q: want real or fake", o.nvml)
	}
	lib := sess.Interface()
	fabric := nodeplugin.FabricFunc(func(context.Context) ([]topology.GPU, error) { return nvmltopology.GPUs(lib) })
	return fabric, func() { _ = sess.Close() }, nil
}

// fakeFabric turns --fake-clique into the fake tray's options: "" keeps gb200-nvl4's own
// clique, "none" leaves its GPUs registering (in no clique).
func fakeFabric(clique string) ([]gputest.Option, error) {
	switch clique {
	case "":
		return nil, nil
	case "none":
		return []gputest.Option{gputest.WithFabric(gputest.ReadyFabric(uuid.NewString(), 1).InProgress())}, nil
	}
	i := strings.LastIndex(clique, ".")
	if i < 0 {
		return nil, usageErrorf(`--fake-clique %q: want "<cluster UUID>.<clique ID>" or "none"`, clique)
	}
	id, err := strconv.ParseUint(clique[i+1:], 10, 32)
	if err != nil {
		return nil, usageErrorf(`--fake-clique %q: want "<cluster UUID>.<clique ID>" or "none"`, clique)
	}
	return []gputest.Option{gputest.WithFabric(gputest.ReadyFabric(clique[:i], uint32(id)))}, nil
}
