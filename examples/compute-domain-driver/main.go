package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Exit codes: 0 success, 2 usage error (an unknown command or flag, a bad value, a missing
// required flag or environment variable), 3 runtime failure (NVML, the API server, a child
// process).
const exitUsage, exitFailure = 2, 3

// usageError marks an error of the command line found by a command's own checks.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var ran bool // a command's work started: its errors are runtime failures unless marked
	work := func(f func(cmd *cobra.Command) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			ran = true
			return f(cmd)
		}
	}
	root := &cobra.Command{
		Use:   "compute-domain-driver",
		Short: "gpudra's ComputeDomain (IMEX) driver: controller, kubelet plugin and IMEX daemon",
		Long: `compute-domain-driver runs the three parts of gpudra's ComputeDomain driver
(compute-domain.nvidia.com), compatible with manifests written for NVIDIA's:

  controller  one per cluster: makes each ComputeDomain's channel claim template and its IMEX
              daemon DaemonSet, labels the nodes its channels are allocated on, keeps its status
  plugin      one per GB200 node (a DaemonSet): the kubelet plugin of IMEX channels and daemons
  daemon      one per node of a domain (the controller's DaemonSet): runs nvidia-imex

Exit status: 0 success, 2 usage error, 3 runtime failure.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usageErrorf("a command is required: controller, plugin or daemon")
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().AddFlag(verbosityFlag())
	root.AddCommand(newControllerCmd(work), newPluginCmd(work), newDaemonCmd(work))
	root.SetArgs(append([]string{}, args...))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	var ue *usageError
	if !ran || errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

// verbosityFlag is klog's -v (also --v), the only one of klog's flags the commands take; the
// chart passes it to the plugin like to the GPU plugin. klog's verbosity is process-wide.
func verbosityFlag() *pflag.Flag {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	v := pflag.PFlagFromGoFlag(klogFlags.Lookup("v"))
	v.Usage = "log verbosity (klog); 2 logs every prepare, unprepare and IMEX daemon start"
	return v
}

// workFunc wraps a command's work (see run).
type workFunc func(f func(cmd *cobra.Command) error) func(*cobra.Command, []string) error

// restConfig loads kubeconfig, or the in-cluster configuration without one, with a client rate
// limit that does not delay kubelet's prepares (the kubelet-plugin helper GETs every claim).
func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, usageErrorf("kubernetes client configuration: %w (outside a cluster, pass --kubeconfig)", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, usageErrorf("kubernetes client configuration: --kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}
