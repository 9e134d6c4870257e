// Command nvml-standin builds the node tier's stand-in NVML library and writes the state of a
// gputest machine beside it (package standin), for trying the reference driver's --nvml=real
// path by hand:
//
//	go run ./cmd/nvml-standin -o /tmp/root/usr/lib64 -machine dgx-a100-40gb
//	gpu-dra-driver inventory --nvml=real --driver-root=/tmp/root
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/test/e2e/cmd/nvml-standin/standin"
)

func main() {
	out := flag.String("o", "", "directory to write "+standin.LibraryName+" and "+standin.StateName+" into (required)")
	machine := flag.String("machine", "dgx-a100-40gb", "gputest machine whose state to write")
	migConfig := flag.String("mig-config", "", "mig-parted configuration to start the machine in")
	stateOnly := flag.Bool("state-only", false, "write the state only, not the library")
	flag.Parse()
	if err := run(*out, *machine, *migConfig, *stateOnly); err != nil {
		fmt.Fprintln(os.Stderr, "nvml-standin:", err)
		os.Exit(1)
	}
}

func run(out, machine, migConfig string, stateOnly bool) error {
	if out == "" {
		return fmt.Errorf("-o is required")
	}
	ctx := context.Background()
	if !stateOnly {
		hdr, err := standin.HeaderDir(ctx, "")
		if err != nil {
			return err
		}
		if _, err := standin.Build(ctx, hdr, out); err != nil {
			return err
		}
	}
	var opts []gputest.Option
	if migConfig != "" {
		opts = append(opts, gputest.WithMIGConfig(migConfig))
	}
	m, err := gputest.New(machine, opts...)
	if err != nil {
		return fmt.Errorf("machine %s: %w", machine, err)
	}
	s, err := standin.FromMachine(m)
	if err != nil {
		return err
	}
	return s.Install(out)
}
