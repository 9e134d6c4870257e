package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/resourcepool"
)

// driverName is the DRA driver name, the attribute domain and the CDI vendor.
const driverName = "accel.example.com"

// Exit codes: 0 success, 2 usage error, 3 runtime failure.
const exitUsage, exitFailure = 2, 3

// options are the flags of the commands.
type options struct {
	nodeName, root, cdiRoot, stateDir, kubeconfig, pluginDir, registrarDir string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &options{}
	root := &cobra.Command{Use: "accel-dra-driver", Short: "a DRA driver for imaginary accelerators (/dev/accel<N>), built on gpudra",
		SilenceErrors: true, SilenceUsage: true}
	root.PersistentFlags().StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "node name, also the pool name (default $NODE_NAME)")
	root.PersistentFlags().StringVar(&o.root, "root", "/", "where dev/accel<N> and sys/class/accel are (a fake directory in tests)")
	var failed bool // a command's work failed, not its command line
	work := func(f func(cmd *cobra.Command) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			if o.nodeName == "" {
				return errors.New("--node-name (or $NODE_NAME) is required")
			}
			err := f(cmd)
			failed = err != nil
			return err
		}
	}
	serve := &cobra.Command{Use: "serve", Short: "run the kubelet plugin until SIGTERM", Args: cobra.NoArgs,
		RunE: work(func(cmd *cobra.Command) error { return o.serve(cmd.Context()) })}
	serve.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	serve.Flags().StringVar(&o.cdiRoot, "cdi-root", cdi.DefaultSpecDir, "where per-claim CDI specs are written")
	serve.Flags().StringVar(&o.stateDir, "state-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, driverName), "where the checkpoint lives")
	serve.Flags().StringVar(&o.pluginDir, "plugin-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, driverName), "the plugin's directory for its DRA socket")
	serve.Flags().StringVar(&o.registrarDir, "registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet's plugin registration directory")
	render := &cobra.Command{Use: "render", Short: "print the ResourceSlices this node publishes, as YAML", Args: cobra.NoArgs,
		RunE: work(func(cmd *cobra.Command) error { return o.render(cmd.Context(), cmd.OutOrStdout()) })}
	root.AddCommand(serve, render)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	if failed {
		return exitFailure
	}
	return exitUsage
}

// pluginConfig is the plugin's configuration for the flags.
func (o *options) pluginConfig() (exclusive.Config, error) {
	w, err := cdi.NewWriter(cdi.WithSpecDir(o.cdiRoot), cdi.WithWriterKind(driverName, "claim"))
	if err != nil {
		return exclusive.Config{}, err
	}
	return exclusive.Config{DriverName: driverName, NodeName: o.nodeName, Driver: accelDriver{root: o.root},
		StateDir: o.stateDir, CDIWriter: w}, nil
}

// serve runs the plugin until ctx ends or the kubelet-plugin helper fails.
func (o *options) serve(ctx context.Context) error {
	rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("API client configuration: %w", err)
	}
	rc.QPS, rc.Burst = 200, 400 // the helper GETs every claim before prepare
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	cfg, err := o.pluginConfig()
	if err != nil {
		return err
	}
	plugin, err := exclusive.New(ctx, cfg)
	if err != nil {
		return err
	}
	report, err := plugin.Start(ctx, exclusive.StartConfig{KubeClient: client, PluginDir: o.pluginDir, RegistrarDir: o.registrarDir})
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting: a shutdown, not a failure
	}
	if err != nil {
		return err
	}
	defer plugin.Stop()
	klog.FromContext(ctx).Info("Serving", "driver", driverName, "node", o.nodeName, "reconciled", report.String())
	select {
	case <-ctx.Done():
		return nil
	case <-plugin.Done():
		return plugin.Err()
	}
}

// render prints the node's ResourceSlices as a multi-document YAML stream.
func (o *options) render(ctx context.Context, out io.Writer) error {
	devices, err := accelDriver{root: o.root}.Devices(ctx)
	if err != nil {
		return err
	}
	if err := resourcepool.ValidateDevices(devices); err != nil {
		return err
	}
	pool, err := resourcepool.New(o.nodeName, devices)
	if err != nil {
		return err
	}
	objs, err := resourcepool.ResourceSlices(driverName, o.nodeName, pool)
	if err != nil {
		return err
	}
	for _, s := range objs {
		b, err := yaml.Marshal(s)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "---\n%s", b)
	}
	return nil
}
