package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, as documented in the root command's help and the README.
const (
	exitOK = 0
	// exitNo: the command ran and the answer is "no" (an invalid layout or configuration, an
	// unschedulable claim, check findings).
	exitNo = 1
	// exitUsage: the command line is wrong (unknown command or flag, bad or conflicting values,
	// missing or extra arguments).
	exitUsage = 2
	// exitFailure: the command could not do its work (NVML, files, the API server, ...).
	exitFailure = 3
)

const exitCodesHelp = `Exit status:
  0  success
  1  the answer is "no": an invalid MIG layout or configuration, an unschedulable claim, check findings
  2  usage error: unknown command or flag, a bad or conflicting flag value, missing or extra arguments,
     a file the command line names that cannot be read, is over its size limit or does not parse
  3  runtime failure: NVML, files, the API server or the plugin failed, or a signal stopped the command`

// exitError carries the exit code an error ends the command with.
type exitError struct {
	code int
	err  error
	// help, when set, is printed on stderr after the error (a command that needs a subcommand).
	help *cobra.Command
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage error (exit 2).
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// usageError marks err as a usage error (exit 2), unless it already carries an exit code.
func usageError(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitUsage, err: err}
}

// answerNo marks err as the answer "no" (exit 1).
func answerNo(err error) error { return &exitError{code: exitNo, err: err} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := os.Args[1:]
	context.AfterFunc(ctx, func() {
		stop() // after the first signal, a second one ends the process at once (the default action)
		if grace, ok := stopGrace(args); ok {
			// A backstop for work that does not watch ctx (a long computation): the command has
			// grace to stop on its own, then the process ends.
			time.AfterFunc(grace, func() {
				fmt.Fprintf(os.Stderr, "gpu-dra-driver: interrupted (%v) and not stopped within %v: exiting\n", context.Cause(ctx), grace)
				os.Exit(exitFailure)
			})
		}
	})
	code := run(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// stopGrace is how long a command may take to stop after SIGINT or SIGTERM before the process
// exits with status 3: a second, for every command but serve, whose shutdown (unpreparing,
// withdrawing its slices) has its own deadlines, and mps-daemon, which waits for its daemon to
// quit (mpsQuitWait).
func stopGrace(args []string) (time.Duration, bool) {
	cmd, _, err := newRootCmd(io.Discard, io.Discard).Find(args)
	if err == nil && (cmd.Name() == "serve" || cmd.Name() == "mps-daemon") {
		return 0, false
	}
	return time.Second, true
}

// run executes the command line args and returns the exit code; commands read os.Stdin.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runIO(ctx, args, nil, stdout, stderr)
}

// runIO is run with stdin (os.Stdin when nil).
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	if stdin != nil {
		root.SetIn(stdin)
	}
	if args == nil {
		args = []string{} // cobra reads os.Args when given nil
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if cmd == nil {
		cmd = root
	}
	code := exitCode(ctx, err)
	if code == exitFailure && ctx.Err() != nil {
		err = fmt.Errorf("interrupted (%v): %w", context.Cause(ctx), err)
	}
	switch code {
	case exitNo:
		// The answer itself ("invalid: ..."), as the command worded it.
		fmt.Fprintln(stderr, err)
	case exitUsage:
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", cmd.CommandPath(), err, cmd.CommandPath())
	default:
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	}
	if ee, ok := errors.AsType[*exitError](err); ok && ee.help != nil {
		fmt.Fprintln(stderr)
		ee.help.SetOut(stderr)
		_ = ee.help.Help()
	}
	return code
}

// exitCode is the one rule that turns a command's error into its exit status:
//   - a command stopped by a signal (ctx done) is a runtime failure, whatever it was doing;
//   - an error marked by the command (usageError, answerNo, runE's runtime failure) keeps its mark;
//   - an unmarked error comes from cobra itself (unknown command or flag, a flag value pflag
//     cannot parse, argument counts): a usage error.
func exitCode(ctx context.Context, err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil:
		return exitFailure
	case errors.As(err, &ee):
		return ee.code
	default:
		return exitUsage
	}
}

// newRootCmd builds the command tree; every call returns a new, independent tree.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpu-dra-driver",
		Short: "gpudra's reference DRA driver for NVIDIA GPUs",
		Long: `gpu-dra-driver is gpudra's reference DRA driver for NVIDIA GPUs.

Every command except serve works without a GPU, on an embedded fake machine (--machine, default
` + defaultMachine + `), unless --nvml=real is given. serve, the kubelet plugin, drives the node's real
GPUs unless --nvml=fake is given.

Flags may come before or after arguments. Long flags take two dashes (--machine l4x8 or
--machine=l4x8).

` + inputLimitsHelp() + `

` + exitCodesHelp,
		SilenceErrors:         true,
		SilenceUsage:          true,
		DisableFlagsInUseLine: true,
		Args:                  noArgs,
		// Without a command: the help, on stderr, and exit 2.
		RunE: func(cmd *cobra.Command, _ []string) error {
			return &exitError{code: exitUsage, err: errors.New("a command is required"), help: cmd}
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newDemoCmd(), newServeCmd(), newRenderCmd(), newInventoryCmd(), newMIGCmd(),
		newTopoCmd(), newCheckCmd(), newVersionCmd(), newMPSDaemonCmd())
	strictCompletion(root)
	withExitCodes(root)
	return root
}

// withExitCodes ends every subcommand's long help with the exit status table (the root's says
// it already).
func withExitCodes(c *cobra.Command) {
	for _, sub := range c.Commands() {
		long := sub.Long
		if long == "" {
			long = sub.Short
		}
		sub.Long = long + "\n\n" + exitCodesHelp
		withExitCodes(sub)
	}
}

// strictCompletion makes "completion" without a shell, or with one it does not know, a usage
// error (exit 2) instead of cobra's help and exit 0.
func strictCompletion(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Args = noArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error {
			var shells []string
			for _, s := range cmd.Commands() {
				shells = append(shells, s.Name())
			}
			return usageErrorf("needs SHELL: one of %s", strings.Join(shells, ", "))
		}
	}
}

// runE wraps a command's work: errors without an exit code are runtime failures (exit 3).
func runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		warnNoOps(cmd.Flags(), cmd.ErrOrStderr())
		err := f(cmd, args)
		var ee *exitError
		if err == nil || errors.As(err, &ee) {
			return err
		}
		return &exitError{code: exitFailure, err: err}
	}
}

// flagError explains a flag parsing error; in particular a Go-style single-dash long flag
// (-machine), which pflag reads as the shorthands m, a, c, ...
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "unknown shorthand flag: "); ok {
		if _, arg, found := strings.Cut(rest, " in "); found {
			name, _, _ := strings.Cut(strings.TrimPrefix(arg, "-"), "=")
			if cmd.Flags().Lookup(name) != nil {
				return fmt.Errorf("%w (long flags take two dashes: --%s)", err, name)
			}
		}
	}
	return err
}

// noArgs rejects positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return fmt.Errorf("unknown command %q%s", args[0], suggest(cmd, args[0]))
		}
		return fmt.Errorf("takes no arguments, got %q", strings.Join(args, " "))
	}
	return nil
}

// exactArgs accepts exactly the named positional arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return fmt.Errorf("needs %s", strings.Join(names[len(args):], " "))
		case len(args) > len(names):
			return fmt.Errorf("takes %s, got extra arguments %q", strings.Join(names, " "), strings.Join(args[len(names):], " "))
		}
		return nil
	}
}

// minArgs accepts one or more positional arguments, described by what.
func minArgs(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("needs %s", what)
		}
		return nil
	}
}

func suggest(cmd *cobra.Command, arg string) string {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(arg); len(s) > 0 {
		return fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return ""
}

// groupCmd is a command that only holds subcommands: without one it prints its help to stderr
// and exits 2.
func groupCmd(c *cobra.Command) *cobra.Command {
	c.Args = noArgs
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		return &exitError{code: exitUsage, err: fmt.Errorf("%s needs a subcommand", cmd.CommandPath()), help: cmd}
	}
	return c
}

// oneOf checks a flag's value against the allowed ones (a usage error otherwise).
func oneOf(flagName, value string, allowed ...string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return usageErrorf("--%s=%q: allowed values are %s", flagName, value, strings.Join(allowed, ", "))
}

// outputFlag registers -o/--output with its allowed values (the first is the default) and their
// shell completion.
func outputFlag(cmd *cobra.Command, usage string, allowed ...string) *string {
	out := cmd.Flags().StringP("output", "o", allowed[0], usage)
	completeValues(cmd, "output", allowed...)
	return out
}

// completeValues offers values for a flag in shell completion.
func completeValues(cmd *cobra.Command, flagName string, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc(flagName, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	})
}

// splitList splits the comma-separated value of --flagName, trimming spaces; an empty value is
// an empty list, an empty item ("a,,b", "a,") a usage error.
func splitList(flagName, s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for i, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			return nil, usageErrorf("--%s=%q: item %d is empty; give a comma-separated list without empty items", flagName, s, i+1)
		}
		out = append(out, v)
	}
	return out, nil
}

// changed reports whether the flag was given on the command line.
func changed(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Changed
}
