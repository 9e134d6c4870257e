package main

import (
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDemoTellsTheWholeStory: -o json says which workloads ran and, for every other file of
// examples/deploy/workloads, why not; the negative examples are exactly those the workloads'
// README says fail; every claim's container is described (nodes, env, mounts by kind).
func TestDemoTellsTheWholeStory(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep demoReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("demo -o json: %v\n%s", err, out)
	}
	var ran []string
	for _, w := range rep.Workloads {
		ran = append(ran, w.File)
		for _, c := range w.Claims {
			if len(c.CDIDevices) == 0 || len(c.DeviceNodes) == 0 || !slices.Contains(c.Env, "NVIDIA_VISIBLE_DEVICES=void") ||
				!slices.ContainsFunc(c.Mounts, func(m mountReport) bool { return m.Kind == mountLibrary }) {
				t.Errorf("%s %s: the container is not described: %+v", w.File, c.Name, c)
			}
		}
	}
	if diff := cmp.Diff(demoWorkloads, ran); diff != "" {
		t.Errorf("workloads run (-want +got):\n%s", diff)
	}
	// Every other file on disk is reported as skipped, with a reason.
	entries, err := os.ReadDir("../deploy/workloads")
	if err != nil {
		t.Fatal(err)
	}
	var wantSkipped, gotSkipped, wantNegative, gotNegative []string
	readme := readmeExpectations(t)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") && !slices.Contains(demoWorkloads, e.Name()) {
			wantSkipped = append(wantSkipped, e.Name())
			if readme[e.Name()].fails {
				wantNegative = append(wantNegative, e.Name())
			}
		}
	}
	for _, s := range rep.Skipped {
		gotSkipped = append(gotSkipped, s.File)
		if s.Reason == "" {
			t.Errorf("%s: skipped without a reason", s.File)
		}
		if strings.HasPrefix(s.Reason, "a negative example") {
			gotNegative = append(gotNegative, s.File)
		}
	}
	sort.Strings(gotSkipped)
	if diff := cmp.Diff(wantSkipped, gotSkipped); diff != "" {
		t.Errorf("skipped workloads (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantNegative, gotNegative); diff != "" {
		t.Errorf("negative examples (-README +demo):\n%s", diff)
	}
	if !rep.DynamicMIG || rep.Published.MIGDevices == 0 {
		t.Errorf("the demo's default is dynamic MIG: %+v", rep.Published)
	}
}

// TestDemoText: the report explains each line a newcomer may find alarming once, however many
// containers show it; --help shows --dynamic-mig's real default; an unschedulable claim is
// reported and makes the answer "no".
func TestDemoText(t *testing.T) {
	code, out, errOut := runCLI(t, "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := strings.Count(out, "env:          NVIDIA_VISIBLE_DEVICES=void"); n < 2 {
		t.Fatalf("%d containers show NVIDIA_VISIBLE_DEVICES=void; the test needs several", n)
	}
	for _, note := range []string{"note: NVIDIA_VISIBLE_DEVICES=void", "note: control nodes:", "note: /dev/nvidia-caps/", "note: time slice",
		"note: compute mode EXCLUSIVE_PROCESS", "note: CUDA_MPS_", "note: the driver's user-space files"} {
		if n := strings.Count(out, note); n != 1 {
			t.Errorf("%q appears %d times, want once", note, n)
		}
	}
	for _, want := range []string{"dynamic MIG on (the demo's default)", "mounts:       12 (", "\nnot run: ",
		"a negative example: it is expected not to allocate: 10-mig-invalid-profile"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	runCases(t, []cliCase{
		{name: "help shows the default", args: []string{"demo", "--help"}, code: 0, stdout: "(default true)"},
		{name: "unschedulable", args: []string{"demo", "--machine", "l4x8", "--workloads", "05-mig-1g.yaml"}, code: 1,
			stdout: "mig-small-template-1: not allocated", stderr: "could not be allocated on l4x8"},
		{name: "unknown workload", args: []string{"demo", "--workloads", "99-nope.yaml"}, code: 2, stderr: `"99-nope.yaml" is not a file of examples/deploy/workloads`},
		{name: "bad output", args: []string{"demo", "-o", "yaml"}, code: 2, stderr: "allowed values are text, json"},
	})
}

// TestDemoJSONSaysWhatRan: on a machine with no MIG-capable GPU, --dynamic-mig (the demo's
// default) changes nothing; -o json says so, as the text report does, instead of reporting
// dynamic MIG on and a setup with --dynamic-mig.
func TestDemoJSONSaysWhatRan(t *testing.T) {
	for _, c := range []struct {
		args            []string
		dynamic, asked  bool
		setup, textMode string
	}{
		{[]string{"--machine", "l4x8"}, false, true, "l4x8", "no GPU of this machine is MIG-capable"},
		{[]string{"--machine", "l4x8", "--dynamic-mig=false"}, false, false, "l4x8", "dynamic MIG off"},
		{[]string{"--machine", "dgx-a100-80gb"}, true, true, "dgx-a100-80gb --dynamic-mig", "dynamic MIG on (the demo's default)"},
	} {
		args := append([]string{"demo", "--workloads", "01-exclusive-gpu.yaml"}, c.args...)
		code, out, errOut := runCLI(t, append(args, "-o", "json")...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
		var rep demoReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%q -o json: %v\n%s", args, err, out)
		}
		if rep.DynamicMIG != c.dynamic || rep.DynamicMIGFlag != c.asked || rep.Setup != c.setup {
			t.Errorf("%q -o json: dynamicMIG %v, dynamicMIGFlag %v, setup %q; want %v, %v, %q",
				args, rep.DynamicMIG, rep.DynamicMIGFlag, rep.Setup, c.dynamic, c.asked, c.setup)
		}
		if code, out, _ := runCLI(t, args...); code != 0 || !strings.Contains(out, c.textMode) {
			t.Errorf("%q: exit %d, text report lacks %q:\n%s", args, code, c.textMode, out)
		}
	}
}
