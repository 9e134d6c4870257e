package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/gpudra/gpudra/mig"
)

const migUsage = `usage: gpu-dra-driver mig <subcommand> [flags]

subcommands:
  profiles      --gpu MODEL                      the GPU-instance profiles of a model
  validate      --gpu MODEL --profiles P,P@S,..  is this layout valid? (exit 0 valid, 1 invalid)
  layouts       --gpu MODEL [--maximal]          every valid position-aware layout
  check-config  FILE [--config NAME]             validate a mig-parted config against --machine

MODEL is an NVML product name, "NVIDIA " prefix optional, case-insensitive
(A100-SXM4-40GB, A100-SXM4-80GB, "H100 80GB HBM3", H200, A30, B200, ...).`

func runMIG(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, migUsage)
		if len(args) == 0 {
			return &exitError{code: 2, err: errors.New("mig: a subcommand is required")}
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "profiles":
		return migProfiles(rest, stdout, stderr)
	case "validate":
		return migValidate(rest, stdout, stderr)
	case "layouts":
		return migLayouts(rest, stdout, stderr)
	case "check-config":
		return migCheckConfig(ctx, rest, stdout, stderr)
	}
	fmt.Fprintln(stderr, migUsage)
	return &exitError{code: 2, err: fmt.Errorf("mig: unknown subcommand %q", sub)}
}

func modelFlag(fs *flag.FlagSet) *string {
	return fs.String("gpu", "", "GPU model: an NVML product name such as A100-SXM4-40GB or \"H100 80GB HBM3\" (required)")
}

func lookupModel(name string) (*mig.Model, error) {
	if name == "" {
		return nil, fmt.Errorf("--gpu is required; known models: %s", strings.Join(mig.ModelNames(), ", "))
	}
	return mig.Lookup(name)
}

// parseInterspersed parses flags that may follow positional arguments (FILE --config x).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func migProfiles(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("mig profiles", stderr)
	gpuName := modelFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := lookupModel(*gpuName)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s (%s, CC %s): %d memory slices, %d compute slices, %d MiB\n\n", m.Name, m.Architecture,
		m.CudaComputeCapability, m.MemorySlices, m.ComputeSlices, m.MemoryMiB)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tID\tMEMORY\tSMS\tCE\tDEC\tENC\tJPEG\tOFA\tMAX\tSOURCE\tPLACEMENTS (start:size)")
	for _, p := range m.Profiles {
		var pl []string
		for _, x := range p.Placements {
			pl = append(pl, fmt.Sprintf("%d:%d", x.Start, x.Size))
		}
		fmt.Fprintf(tw, "%s\t%d\t%dMiB\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Name, p.ID, p.MemoryMiB, p.Multiprocessors,
			p.CopyEngines, p.Decoders, p.Encoders, p.JpegEngines, p.OfaEngines, p.InstanceCount, p.Sources.Lowest(), strings.Join(pl, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, "\nSOURCE is the least certain origin of a row's values: recorded (printed by nvidia-smi on this model),\n"+
		"documented (NVIDIA's tables), inferred (carried over from a sibling model or computed, not confirmed on this model).")
	return err
}

func migValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("mig validate", stderr)
	gpuName := modelFlag(fs)
	profiles := fs.String("profiles", "", "comma-separated profiles, repeats allowed, optional @start (e.g. 3g.40gb,2g.20gb@4,1g.10gb)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := lookupModel(*gpuName)
	if err != nil {
		return err
	}
	if *profiles == "" {
		return errors.New("--profiles is required")
	}
	layout, err := mig.ParseLayout(*profiles)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("invalid: %w", err)}
	}
	placed, err := mig.Validate(m, layout)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("invalid: %w", err)}
	}
	fmt.Fprintf(stdout, "valid: %s\n\n%s", mig.FormatLayout(placed), mig.Diagram(m, placed))
	return nil
}

func migLayouts(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("mig layouts", stderr)
	gpuName := modelFlag(fs)
	maximal := fs.Bool("maximal", false, "only layouts to which no instance can be added")
	only := fs.String("only", "", "restrict to these comma-separated profiles")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := lookupModel(*gpuName)
	if err != nil {
		return err
	}
	var opts []mig.LayoutOption
	if *only != "" {
		opts = append(opts, mig.WithProfiles(strings.Split(*only, ",")...))
	}
	list := mig.Layouts
	kind := "valid"
	if *maximal {
		list, kind = mig.MaximalLayouts, "maximal"
	}
	layouts, err := list(m, opts...)
	if err != nil {
		return err
	}
	for _, l := range layouts {
		fmt.Fprintln(stdout, mig.FormatLayout(l))
	}
	fmt.Fprintf(stdout, "# %d %s layouts on %s\n", len(layouts), kind, m.Name)
	return nil
}

func migCheckConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("mig check-config", stderr)
	var nf nodeFlags
	nf.register(fs)
	configName := fs.String("config", "", "check only this configuration of the file (default: all)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("mig check-config takes exactly one FILE")
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return err
	}
	spec, err := mig.ParseConfig(data)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("invalid: %s: %w", pos[0], err)}
	}
	n, err := nf.open(ctx)
	if err != nil {
		return err
	}
	defer n.close()
	var gpus []mig.GPUInfo
	for _, g := range n.inv.GPUs {
		gpus = append(gpus, mig.GPUInfo{Index: g.Index, ProductName: g.ProductName, PCIDeviceID: g.PCIDeviceID})
	}
	names := []string{*configName}
	if *configName == "" {
		names = names[:0]
		for name := range spec.MigConfigs {
			names = append(names, name)
		}
		sort.Strings(names)
	}
	var errs []error
	for _, name := range names {
		plans, err := mig.CheckConfig(spec, name, gpus)
		if err != nil {
			errs = append(errs, err)
			fmt.Fprintf(stdout, "%s: INVALID\n", name)
			continue
		}
		fmt.Fprintf(stdout, "%s: valid on %s\n", name, nf.machineLabel())
		for _, p := range plans {
			state := "MIG disabled"
			if p.MigEnabled {
				state = mig.FormatLayout(p.Layout)
			}
			fmt.Fprintf(stdout, "  GPU %d (%s): %s\n", p.Index, p.Model, state)
		}
	}
	if len(errs) > 0 {
		return &exitError{code: 1, err: errors.Join(errs...)}
	}
	return nil
}

func (n *nodeFlags) machineLabel() string {
	if n.nvmlMode == "real" {
		return "this node"
	}
	return n.machine
}
