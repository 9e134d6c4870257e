package main

import (
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpudra/gpudra/gpu/gputest"
)

var backquoted = regexp.MustCompile("`([^`]+)`")

// TestMachineListsAgree: the fake machines README lists, the machines docs/hardware.md's table
// describes and the list in every command's --machine help are gputest.Machines(), the catalog
// the CLI accepts: a machine added there and missing from a document (or the reverse) fails.
func TestMachineListsAgree(t *testing.T) {
	want := gputest.Machines()

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(readme), "\nFake machines: ")
	if !ok {
		t.Fatal(`README.md has no "Fake machines: " paragraph`)
	}
	para, _, _ = strings.Cut(para, " (the order of")
	var got []string
	for _, m := range backquoted.FindAllStringSubmatch(para, -1) {
		got = append(got, m[1])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("README.md's fake machines differ from gputest.Machines() (-catalog +README):\n%s", diff)
	}

	hw, err := os.ReadFile("../../docs/hardware.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(hw), "\n| fake |")
	if !ok {
		t.Fatal(`docs/hardware.md has no table starting "| fake |"`)
	}
	got = nil
	for i, line := range strings.Split(table, "\n") {
		if i == 0 || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "| ") {
			break // the end of the table
		}
		for name := range strings.SplitSeq(strings.Split(line, "|")[1], ",") {
			got = append(got, strings.TrimSpace(name))
		}
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(want)), slices.Sorted(slices.Values(got))); diff != "" {
		t.Errorf("docs/hardware.md's table of fakes differs from gputest.Machines() (-catalog +table):\n%s", diff)
	}

	helps := 0
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if f := cmd.Flags().Lookup(flagMachine); f != nil && !f.Hidden {
			helps++
			_, usage := pflag.UnquoteUsage(f)
			if !strings.HasSuffix(usage, ": "+strings.Join(want, ", ")) {
				t.Errorf("%s --machine help does not list gputest.Machines(): %q", cmd.CommandPath(), usage)
			}
		}
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard))
	if helps < 5 {
		t.Errorf("%d commands have a --machine flag, want at least 5 (demo, render, check, inventory, serve, ...)", helps)
	}
}
