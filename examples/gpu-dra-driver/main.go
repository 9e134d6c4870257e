package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// exitError carries an exit code chosen by a command (e.g. 1 for "layout invalid").
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"demo":      {"the whole pipeline in one process: slices, allocation, prepare over the DRA socket, CDI injection", runDemo},
		"serve":     {"run the kubelet plugin against a real API server", runServe},
		"render":    {"print the DeviceClasses and ResourceSlices the driver publishes (YAML stream)", runRender},
		"inventory": {"print GPUs, MIG devices and capacity used/free", runInventory},
		"mig":       {"MIG profiles, layout validation, layouts and mig-parted config checks", runMIG},
		"topo":      {"the GPU topology matrix (NVLink, PCIe, NUMA) of the machine", runTopo},
		"check":     {"lint, policy and upgrade hints for manifests, then simulated allocation on a machine", runCheck},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gpu-dra-driver: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	if err := cmd.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ee *exitError
		if errors.As(err, &ee) {
			fmt.Fprintf(stderr, "%s\n", ee.err)
			return ee.code
		}
		fmt.Fprintf(stderr, "gpu-dra-driver %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: gpu-dra-driver <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'gpu-dra-driver <command> -h' for the flags of a command.")
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gpu-dra-driver "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func oneOf(flagName, value string, allowed ...string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return fmt.Errorf("--%s=%q: allowed values are %s", flagName, value, strings.Join(allowed, ", "))
}
