package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

// daemonOptions are the flags of the daemon command.
type daemonOptions struct {
	kubeconfig, dir, driverRoot string
}

func newDaemonCmd(work workFunc) *cobra.Command {
	o := &daemonOptions{}
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "run the IMEX daemon of this node in one ComputeDomain until SIGTERM",
		Long: `daemon runs nvidia-imex for one node of one ComputeDomain, with the addresses of the domain's
nodes in its NVLink clique, keeps it running and reports the node (address, clique, Ready) in
the domain's status; it withdraws the node when it stops. The domain's DaemonSet runs it; it
reads the pod's environment: NODE_NAME, POD_IP, COMPUTE_DOMAIN_UUID, COMPUTE_DOMAIN_NAME,
COMPUTE_DOMAIN_NAMESPACE (from the pod spec) and COMPUTE_DOMAIN_CLIQUE (from its daemon claim).`,
		Args: cobra.NoArgs,
		RunE: work(func(cmd *cobra.Command) error { return o.run(cmd.Context()) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	f.StringVar(&o.dir, "dir", computedomain.DaemonConfigDir, "the daemon's directory, prepared by the node plugin")
	f.StringVar(&o.driverRoot, "driver-root", "/", "where nvidia-imex and nvidia-imex-ctl are")
	return cmd
}

func (o *daemonOptions) run(ctx context.Context) error {
	cfg, err := imex.ConfigFromEnv(os.Getenv)
	if err != nil {
		return &usageError{err: err}
	}
	cfg.Dir, cfg.DriverRoot = o.dir, o.driverRoot
	rc, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	d, err := imex.NewDaemon(cfg, imex.ClientDomains{Client: c})
	if err != nil {
		return &usageError{err: err}
	}
	return d.Run(ctx) // stops nvidia-imex and withdraws the node before it returns
}
