package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	inputpkg "github.com/gpudra/gpudra/internal/input"
	"github.com/gpudra/gpudra/mig"
)

const modelHelp = `MODEL is an NVML product name, "NVIDIA " prefix optional, case-insensitive
(A100-SXM4-40GB, A100-SXM4-80GB, "H100 80GB HBM3", H200, A30, B200, ...).`

func newMIGCmd() *cobra.Command {
	cmd := groupCmd(&cobra.Command{
		Use:   "mig",
		Short: "MIG profiles, layout validation, layouts and mig-parted config checks",
		Long:  "MIG profiles, layout validation, layouts and mig-parted config checks, from the built-in catalog.\n\n" + modelHelp,
	})
	cmd.AddCommand(newMIGProfilesCmd(), newMIGValidateCmd(), newMIGLayoutsCmd(), newMIGCheckConfigCmd())
	return cmd
}

// modelFlag registers --gpu MODEL.
func modelFlag(cmd *cobra.Command) *string {
	name := cmd.Flags().String("gpu", "", "GPU model: an NVML product name such as A100-SXM4-40GB or \"H100 80GB HBM3\" (required)")
	completeValues(cmd, "gpu", mig.ModelNames()...)
	return name
}

func lookupModel(name string) (*mig.Model, error) {
	if name == "" {
		return nil, usageErrorf("--gpu is required; known models: %s", strings.Join(mig.ModelNames(), ", "))
	}
	m, err := mig.Lookup(name)
	if err != nil {
		return nil, usageErrorf("--gpu: %w", err)
	}
	return m, nil
}

func newMIGProfilesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "profiles --gpu MODEL",
		Short:   "the GPU-instance profiles of a model",
		Long:    "profiles lists the GPU-instance profiles of a model: memory, SMs, engines, instance count, placements.\n\n" + modelHelp,
		Example: "  gpu-dra-driver mig profiles --gpu A100-SXM4-40GB",
		Args:    noArgs,
	}
	gpuName := modelFlag(cmd)
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error { return migProfiles(*gpuName, cmd.OutOrStdout()) })
	return cmd
}

func newMIGValidateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validate --gpu MODEL --profiles P,P@S,...",
		Short: "is this MIG layout valid on one GPU? (exit 0 valid, 1 invalid with the reason)",
		Long: "validate checks a layout of GPU instances on one GPU of the model and draws it; it exits 0 when\n" +
			"the layout is valid and 1 with the reason on stderr when it is not, a profile MODEL does not have\n" +
			"included (as in layouts --only). An entry of --profiles that does not parse is a usage error (2).\n\n" + modelHelp,
		Example: "  gpu-dra-driver mig validate --gpu A100-SXM4-80GB --profiles 3g.40gb,2g.20gb,1g.10gb,1g.10gb",
		Args:    noArgs,
	}
	gpuName := modelFlag(cmd)
	profiles := cmd.Flags().String("profiles", "", "comma-separated profiles, repeats allowed, optional @start (e.g. 3g.40gb,2g.20gb@4,1g.10gb)")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error { return migValidate(*gpuName, *profiles, cmd.OutOrStdout()) })
	return cmd
}

func newMIGLayoutsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "layouts --gpu MODEL",
		Short:   "every valid position-aware MIG layout of a model",
		Long:    "layouts lists every valid position-aware layout of GPU instances on one GPU of the model.\n\n" + modelHelp,
		Example: "  gpu-dra-driver mig layouts --gpu A100-SXM4-40GB --maximal\n  gpu-dra-driver mig layouts --gpu A30 --only 1g.6gb,2g.12gb",
		Args:    noArgs,
	}
	gpuName := modelFlag(cmd)
	maximal := cmd.Flags().Bool("maximal", false, "only layouts to which no instance can be added")
	only := cmd.Flags().String("only", "", "restrict to these comma-separated profiles")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		return migLayouts(*gpuName, *maximal, *only, cmd.OutOrStdout())
	})
	return cmd
}

func newMIGCheckConfigCmd() *cobra.Command {
	var nf nodeFlags
	cmd := &cobra.Command{
		Use:   "check-config FILE",
		Short: "validate a mig-parted config file against the machine",
		Long: "check-config validates every configuration of a mig-parted (version: v1) file against the\n" +
			"machine's GPUs, or only --config NAME; it exits 1 with the reasons when one is invalid, and 2\n" +
			"when FILE cannot be read, is over 1 MiB or is not a mig-parted document, as through the mig-config flag.",
		Example: "  gpu-dra-driver mig check-config examples/deploy/mig-parted/config.yaml --machine dgx-a100-40gb",
		Args:    exactArgs("FILE"),
	}
	nf.register(cmd, flagNVML, flagMachine)
	configName := cmd.Flags().String("config", "", "check only this configuration of the file (default: all)")
	cmd.RunE = runE(func(cmd *cobra.Command, args []string) error {
		return migCheckConfig(cmd.Context(), &nf, args[0], *configName, cmd.OutOrStdout())
	})
	return cmd
}

func migProfiles(gpuName string, stdout io.Writer) error {
	m, err := lookupModel(gpuName)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s (%s, CC %s): %d memory slices, %d compute slices, %d MiB\n\n", m.Name, m.Architecture,
		majorMinor(m.CudaComputeCapability), m.MemorySlices, m.ComputeSlices, m.MemoryMiB)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tPROFILE ID\tMEMORY\tSMS\tCE\tDEC\tENC\tJPEG\tOFA\tMAX\tSOURCE\tPLACEMENTS (start:size)")
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

func migValidate(gpuName, profiles string, stdout io.Writer) error {
	m, err := lookupModel(gpuName)
	if err != nil {
		return err
	}
	if strings.TrimSpace(profiles) == "" {
		return usageErrorf("--profiles is required (e.g. --profiles 3g.20gb,2g.10gb)")
	}
	layout, err := mig.ParseLayout(profiles)
	if err != nil {
		return usageErrorf("--profiles=%q: %w", profiles, err)
	}
	// A well-formed profile the model does not have makes the layout invalid on it: the answer
	// no (exit 1), as DESIGN's contract for validate says and as in layouts --only.
	placed, err := mig.Validate(m, layout)
	if err != nil {
		return answerNo(fmt.Errorf("invalid: %w", err))
	}
	fmt.Fprintf(stdout, "valid: %s\n\n%s", mig.FormatLayout(placed), mig.Diagram(m, placed))
	return nil
}

func migLayouts(gpuName string, maximal bool, only string, stdout io.Writer) error {
	m, err := lookupModel(gpuName)
	if err != nil {
		return err
	}
	var opts []mig.LayoutOption
	profiles, err := splitList("only", only)
	if err != nil {
		return err
	}
	if len(profiles) > 0 {
		opts = append(opts, mig.WithProfiles(profiles...))
	}
	list := mig.Layouts
	kind := "valid"
	if maximal {
		list, kind = mig.MaximalLayouts, "maximal"
	}
	layouts, err := list(m, opts...)
	var ve *mig.ValidationError
	if errors.As(err, &ve) && ve.Kind == mig.ConflictUnknownProfile {
		// A well-formed profile the model does not have: no layout has it (exit 1, as in
		// validate).
		return answerNo(fmt.Errorf("--only=%q: %w", only, err))
	}
	if err != nil {
		return usageErrorf("--only=%q: %w", only, err)
	}
	for _, l := range layouts {
		fmt.Fprintln(stdout, mig.FormatLayout(l))
	}
	fmt.Fprintf(stdout, "# %d %s layouts on %s\n", len(layouts), kind, m.Name)
	return nil
}

func migCheckConfig(ctx context.Context, nf *nodeFlags, file, configName string, stdout io.Writer) error {
	data, err := readConfigFile(ctx, file)
	if err != nil {
		return err
	}
	// A file that is not a mig-parted document is a wrong argument (exit 2), as it is through
	// --mig-config; a mig-parted document whose configurations break its rules is the answer no.
	var probe mig.ConfigSpec
	if err := inputpkg.UnmarshalStrict(data, &probe); err != nil {
		return usageErrorf("%s: not a mig-parted config: %w", file, err)
	}
	if probe.Version != "v1" {
		return usageErrorf("%s: not a mig-parted config: version is %q, want \"v1\"", file, probe.Version)
	}
	spec, err := mig.ParseConfig(data)
	if err != nil {
		// The reason goes with the verdict (stdout), so that 2>/dev/null still says why.
		fmt.Fprintf(stdout, "%s: INVALID\n%s", file, indentReason(err))
		return answerNo(fmt.Errorf("%s is invalid (the reason is printed with the verdict)", file))
	}
	names := slices.Sorted(maps.Keys(spec.MigConfigs))
	if configName != "" {
		if _, ok := spec.MigConfigs[configName]; !ok {
			return usageErrorf("--config=%q: %s has %s", configName, file, strings.Join(names, ", "))
		}
		names = []string{configName}
	}
	n, err := nf.open(ctx)
	if err != nil {
		return err
	}
	defer n.close()
	gpus := migGPUs(n.inv)
	var invalid []string
	for _, name := range names {
		plans, err := mig.CheckConfig(spec, name, gpus)
		if problems := configProblems(spec, name, n.inv); len(problems) > 0 {
			err = errors.Join(err, fmt.Errorf("mig config %q on %s: %s", name, nf.machineLabel(), strings.Join(problems, "; ")))
		}
		if err != nil {
			invalid = append(invalid, strconv.Quote(name))
			fmt.Fprintf(stdout, "%s: INVALID on %s\n%s", name, nf.machineLabel(), indentReason(err))
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
	if len(invalid) > 0 {
		return answerNo(fmt.Errorf("%s: %d of %d configurations invalid on %s: %s (the reasons are printed with the verdicts)",
			file, len(invalid), len(names), nf.machineLabel(), strings.Join(invalid, ", ")))
	}
	return nil
}

// indentReason is err's text as lines under a verdict, indented by "  reason: ".
func indentReason(err error) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimSpace(err.Error()), "\n") {
		fmt.Fprintf(&b, "  reason: %s\n", line)
	}
	return b.String()
}
