// Command e2e-binaries builds the control-plane binaries the e2e tier runs (etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager) from the versions this module pins, into a cache
// directory keyed by the Kubernetes version, and reuses them on later runs. It prints one line per
// binary with how long it took, plus a heartbeat while a build runs, so a cold CI run does not
// look hung. The last line of its output is the directory, for scripts.
//
// Usage (from test/e2e):
//
//	go run ./cmd/e2e-binaries            # build what is missing
//	go run ./cmd/e2e-binaries -rebuild   # rebuild everything
//	go run ./cmd/e2e-binaries -example-driver   # also dra-example-driver's kubelet plugin (make bench-e2e)
//	go run ./cmd/e2e-binaries -node      # also kubelet, containerd, runc and CNI (make e2e-node)
//	go run ./cmd/e2e-binaries -patch patches/pool-cache.patch   # also a patched kube-scheduler
//
// The cache root is $GPUDRA_E2E_CACHE, or ~/.cache/gpudra-e2e.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-binaries:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("e2e-binaries", flag.ContinueOnError)
	rebuild := fs.Bool("rebuild", false, "rebuild every binary even when the cache has it")
	node := fs.Bool("node", false, "also the node tier's parts: kubelet, containerd (pinned by "+binaries.ContainerdModuleDir+"), and runc and the CNI plugins from Debian's packages when missing")
	example := fs.Bool("example-driver", false, "also build dra-example-driver's kubelet plugin at the version "+binaries.ExampleDriverModuleDir+" pins (the benchmarks compare against it)")
	patch := fs.String("patch", "", "also build kube-scheduler from the pinned sources with this patch applied (make bench-e2e-scale SCALE_PATCHED=1; see framework/binaries Set.Patched)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	set, err := binaries.Resolve(ctx)
	if err != nil {
		return err
	}
	if err := set.Build(ctx, out, *rebuild); err != nil {
		return err
	}
	if *node {
		if _, err := set.BuildNode(ctx, out, *rebuild); err != nil {
			return err
		}
		if err := binaries.EnsureHostTools(ctx, out); err != nil {
			return err
		}
	}
	if *example {
		if _, err := set.ExampleDriverPath(ctx, out, *rebuild); err != nil {
			return err
		}
	}
	if *patch != "" {
		patched, err := set.Patched(ctx, out, *patch, binaries.KubeScheduler)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, "patched kube-scheduler:", patched.Path(binaries.KubeScheduler))
	}
	fmt.Fprintln(out, set.Dir)
	return nil
}
