package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/examples/deploy"
)

// demoReport is what the demo did: the text report is written from it, and -o json prints it.
type demoReport struct {
	Machine       string `json:"machine"`
	GPUs          int    `json:"gpus"`
	Product       string `json:"product"`
	DriverVersion string `json:"driverVersion"`
	Node          string `json:"node"`
	// DynamicMIG says whether dynamic MIG was in effect: --dynamic-mig and a MIG-capable GPU.
	DynamicMIG bool `json:"dynamicMIG"`
	// DynamicMIGFlag is --dynamic-mig as given (or defaulted), even where it changed nothing.
	DynamicMIGFlag   bool   `json:"dynamicMIGFlag"`
	ConsumableMemory bool   `json:"consumableMemory"`
	MIGConfig        string `json:"migConfig,omitempty"`
	// Setup is the machine and the flags in effect (no --dynamic-mig where no GPU is
	// MIG-capable), in the form of a workload's "# Target machine:" line.
	Setup     string            `json:"setup"`
	Published publishedReport   `json:"published"`
	Workloads []workloadReport  `json:"workloads"`
	Skipped   []skippedWorkload `json:"skipped"`
	Teardown  teardownReport    `json:"teardown"`
}

type publishedReport struct {
	Devices       int      `json:"devices"`
	FullGPUs      int      `json:"fullGPUs"`
	MIGDevices    int      `json:"migDevices"`
	CounterSets   int      `json:"counterSets"`
	DeviceClasses []string `json:"deviceClasses"`
}

type workloadReport struct {
	File string `json:"file"`
	// Shows and Target are the workload's "# Shows:" and "# Target machine:" comments.
	Shows  string        `json:"shows"`
	Target string        `json:"target"`
	Claims []claimReport `json:"claims"`
}

type claimReport struct {
	Name    string   `json:"name"`
	Devices []string `json:"devices,omitempty"`
	// Unschedulable is why the scheduler's allocator found no devices; Error is why preparing
	// or injecting failed.
	Unschedulable string        `json:"unschedulable,omitempty"`
	Error         string        `json:"error,omitempty"`
	CDIDevices    []string      `json:"cdiDevices,omitempty"`
	DeviceNodes   []deviceNode  `json:"deviceNodes,omitempty"`
	ControlNodes  []deviceNode  `json:"controlNodes,omitempty"`
	Env           []string      `json:"env,omitempty"`
	Mounts        []mountReport `json:"mounts,omitempty"`
	// Host are the settings preparing the claim changed on the (in-memory) host.
	Host []string `json:"host,omitempty"`
}

type deviceNode struct {
	Path  string `json:"path"`
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
}

func (n deviceNode) String() string { return fmt.Sprintf("%s (%d:%d)", n.Path, n.Major, n.Minor) }

type mountReport struct {
	Kind          string `json:"kind"`
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
}

type skippedWorkload struct {
	File   string `json:"file"`
	Target string `json:"target"`
	Reason string `json:"reason"`
}

type teardownReport struct {
	Prepared         int      `json:"prepared"`
	CDISpecsLeft     int      `json:"cdiSpecsLeft"`
	MIGInstancesLeft int      `json:"migInstancesLeft"`
	Errors           []string `json:"errors,omitempty"`
}

// Mount kinds.
const (
	mountLibrary  = "driver library"
	mountBinary   = "driver binary"
	mountFirmware = "firmware"
)

// isControlNode says whether a device node is one every GPU container gets, whatever its GPUs.
func isControlNode(p string) bool {
	return p == "/dev/nvidiactl" || p == "/dev/nvidia-modeset" || strings.HasPrefix(p, "/dev/nvidia-uvm")
}

func otherMountKind(containerPath string) string {
	switch containerPath {
	case "/tmp/nvidia-mps":
		return "MPS pipe directory"
	case "/dev/shm":
		return "MPS shared memory"
	}
	return "other"
}

// err is the demo's outcome: a runtime failure when preparing or unpreparing failed, the answer
// "no" when a claim could not be allocated.
func (r *demoReport) err() error {
	failed, unschedulable := len(r.Teardown.Errors), 0
	for _, w := range r.Workloads {
		for _, c := range w.Claims {
			switch {
			case c.Error != "":
				failed++
			case c.Unschedulable != "":
				unschedulable++
			}
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("demo: %d of the claims failed (see the report)", failed)
	case unschedulable > 0:
		return answerNo(fmt.Errorf("demo: %d of the claims could not be allocated on %s (see the report)", unschedulable, r.Setup))
	}
	return nil
}

// workloadHeader is what a seed workload's leading comments say about it.
type workloadHeader struct {
	shows, target, expected string
}

// parseHeader reads the "# Shows:", "# Target machine:" and "# Expected:" comments (with their
// indented continuation lines) of a seed workload.
func parseHeader(data []byte) workloadHeader {
	fields := map[string]*strings.Builder{}
	var cur *strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "#")
		if !ok {
			break
		}
		if strings.HasPrefix(line, "   ") && cur != nil {
			cur.WriteString(" " + strings.TrimSpace(line))
			continue
		}
		cur = nil
		if key, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.Contains(key, " (") {
			cur = &strings.Builder{}
			cur.WriteString(strings.TrimSpace(value))
			fields[key] = cur
		}
	}
	get := func(k string) string {
		if b := fields[k]; b != nil {
			return b.String()
		}
		return ""
	}
	return workloadHeader{shows: get("Shows"), target: targetMachine(data), expected: get("Expected")}
}

// seedWorkloads lists the files of examples/deploy/workloads.
func seedWorkloads() ([]string, error) {
	paths, err := fs.Glob(deploy.Files, "workloads/*.yaml")
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(paths))
	for _, p := range paths {
		names = append(names, path.Base(p))
	}
	return names, nil
}

// skippedWorkloads says why each seed workload that did not run was left out.
func skippedWorkloads(ran []string, setup string) ([]skippedWorkload, error) {
	all, err := seedWorkloads()
	if err != nil {
		return nil, err
	}
	var out []skippedWorkload
	for _, f := range all {
		if slices.Contains(ran, f) {
			continue
		}
		data, err := deploy.Files.ReadFile("workloads/" + f)
		if err != nil {
			return nil, err
		}
		h := parseHeader(data)
		s := skippedWorkload{File: f, Target: h.target}
		switch {
		case strings.HasPrefix(h.expected, "FAILS"):
			s.Reason = "a negative example: it is expected not to allocate"
		case !runsOn(h.target, setup):
			s.Reason = "written for " + strings.Join(strings.Fields(h.target), " ")
		default:
			s.Reason = "left out of the default set, which shows each feature once"
		}
		out = append(out, s)
	}
	return out, nil
}

// runsOn says whether a workload written for target ("dgx-a100-40gb --mig-config all-balanced")
// runs as written on setup: the same machine and every flag of the target (the setup may have
// more, e.g. --dynamic-mig, which keeps full GPUs published).
func runsOn(target, setup string) bool {
	t, s := strings.Fields(target), strings.Fields(setup)
	if len(t) == 0 {
		return true
	}
	if len(s) == 0 || t[0] != s[0] {
		return false
	}
	for _, f := range t[1:] {
		if !slices.Contains(s[1:], f) {
			return false
		}
	}
	return true
}

func writeDemo(w io.Writer, output string, r *demoReport) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	r.writeHeader(&b)
	notes := explainer{seen: map[string]bool{}}
	for _, wl := range r.Workloads {
		fmt.Fprintf(&b, "\n== %s\n  shows: %s\n", wl.File, wl.Shows)
		if !runsOn(wl.Target, r.Setup) {
			fmt.Fprintf(&b, "  written for %s; runs here on %s\n", strings.Join(strings.Fields(wl.Target), " "), r.Setup)
		}
		for _, c := range wl.Claims {
			writeClaim(&b, c, &notes)
		}
	}
	r.writeSkipped(&b)
	r.writeTeardown(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *demoReport) writeHeader(b *strings.Builder) {
	fmt.Fprintf(b, "gpudra demo: the path of GPU claims through the driver, in one process, with no GPU and no cluster\n")
	fmt.Fprintf(b, "  machine:  fake %s: %dx %s, driver %s (--machine)\n", r.Machine, r.GPUs, r.Product, r.DriverVersion)
	fmt.Fprintf(b, "  node:     %s, also the pool name (--node-name)\n", r.Node)
	mode := "dynamic MIG on (the demo's default): MIG instances are created when a claim is prepared; --dynamic-mig=false publishes the GPUs' current layout"
	if r.DynamicMIGFlag && !r.DynamicMIG {
		mode = "dynamic MIG asked for (the demo's default), but no GPU of this machine is MIG-capable: full GPUs only"
	}
	if !r.DynamicMIGFlag {
		mode = "dynamic MIG off: the GPUs' current MIG layout is published as it is"
		if r.MIGConfig != "" {
			mode += " (--mig-config " + r.MIGConfig + ")"
		}
	}
	fmt.Fprintf(b, "  mode:     %s; consumable memory %s\n", mode, onOff(r.ConsumableMemory))
	fmt.Fprintf(b, "  steps:    ResourceSlices -> the scheduler's allocator -> NodePrepareResources on the plugin's DRA socket, as kubelet calls it\n")
	fmt.Fprintf(b, "            -> the CDI devices injected into an OCI spec, as a container runtime does -> NodeUnprepareResources\n")
	p := r.Published
	fmt.Fprintf(b, "published: %d devices, %d counter sets; DeviceClasses %s\n", p.Devices, p.CounterSets, strings.Join(p.DeviceClasses, ", "))
	fmt.Fprintf(b, "  (%d full GPUs and %d MIG devices", p.FullGPUs, p.MIGDevices)
	if r.DynamicMIG && p.MIGDevices > 0 {
		b.WriteString("; with dynamic MIG, every placement of every MIG profile is a device, and each GPU's counter set keeps them from overlapping")
	}
	b.WriteString(")\n")
	fmt.Fprintf(b, "ran %d of the %d seed workloads in examples/deploy/workloads (--workloads):\n", len(r.Workloads), len(r.Workloads)+len(r.Skipped))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func writeClaim(b *strings.Builder, c claimReport, notes *explainer) {
	switch {
	case c.Unschedulable != "":
		fmt.Fprintf(b, "  %s: %s\n", c.Name, c.Unschedulable)
		notes.explain(b, "check", true, "gpu-dra-driver check FILE --machine ... runs the same allocator and says why a claim does not fit")
		return
	case c.Error != "" && len(c.CDIDevices) == 0:
		fmt.Fprintf(b, "  %s: FAILED: %s\n", c.Name, c.Error)
		return
	}
	fmt.Fprintf(b, "  %s: allocated %s\n", c.Name, strings.Join(c.Devices, ", "))
	fmt.Fprintf(b, "    CDI devices:  %s\n", strings.Join(c.CDIDevices, " "))
	if c.Error != "" {
		fmt.Fprintf(b, "    FAILED: %s\n", c.Error)
		return
	}
	var nodes []string
	for _, n := range c.DeviceNodes {
		nodes = append(nodes, n.String())
	}
	fmt.Fprintf(b, "    device nodes: %s + %d control nodes\n", strings.Join(nodes, ", "), len(c.ControlNodes))
	notes.explain(b, "control", len(c.ControlNodes) > 0, controlNote(c.ControlNodes))
	notes.explain(b, "caps", slices.ContainsFunc(c.DeviceNodes, func(n deviceNode) bool { return strings.HasPrefix(n.Path, "/dev/nvidia-caps/") }),
		"/dev/nvidia-caps/nvidia-cap<N> grant access to this MIG device's GPU instance and compute instance only; the parent GPU's node comes with them, as CUDA opens it")
	if len(c.Env) > 0 {
		fmt.Fprintf(b, "    env:          %s\n", strings.Join(c.Env, " "))
	}
	notes.explain(b, "void", slices.Contains(c.Env, "NVIDIA_VISIBLE_DEVICES=void"),
		"NVIDIA_VISIBLE_DEVICES=void replaces the image's =all (CUDA images set it): the NVIDIA runtime adds no GPUs of its own, so the container gets exactly its claim's devices, through CDI; CUDA does not read the variable")
	notes.explain(b, "mps", slices.ContainsFunc(c.Env, func(e string) bool { return strings.HasPrefix(e, "CUDA_MPS_") }),
		"CUDA_MPS_* connect the container to its claim's MPS control daemon (CUDA_MPS_PIPE_DIRECTORY) with the claim's limits: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of the SMs, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<device>=<MiB>M per device")
	fmt.Fprintf(b, "    mounts:       %s\n", mountSummary(c.Mounts))
	notes.explain(b, "mounts", len(c.Mounts) > 0,
		"the driver's user-space files (libcuda, libnvidia-ml, nvidia-smi, GSP firmware, ...) are bind-mounted read-only from the driver root, so any image runs CUDA; -o json lists every mount")
	if len(c.Host) > 0 {
		fmt.Fprintf(b, "    host: %s\n", strings.Join(c.Host, "; "))
		notes.explain(b, "host", true,
			"host: what the plugin changed on the node for this claim (recorded by an in-memory host here; on a node, nvidia-smi and nvidia-cuda-mps-control do it); unprepare restores it")
	}
	notes.explain(b, "timeslice", slices.ContainsFunc(c.Host, func(h string) bool { return strings.HasPrefix(h, "time slice") }),
		"time slice <N> is nvidia-smi compute-policy --set-timeslice: 0 default, 1 short, 2 medium, 3 long (the claim's timeSlicingConfig.interval)")
	notes.explain(b, "exclusive", slices.ContainsFunc(c.Host, func(h string) bool { return strings.Contains(h, "EXCLUSIVE_PROCESS") }),
		"compute mode EXCLUSIVE_PROCESS: only one process may use the GPU, the MPS server, through which the claim's containers share it")
}

func controlNote(nodes []deviceNode) string {
	var paths []string
	for _, n := range nodes {
		paths = append(paths, n.Path)
	}
	return "control nodes: " + strings.Join(paths, ", ") + ": the driver's, which every GPU container needs whatever its GPUs"
}

// mountSummary counts mounts by kind: "12 (9 driver libraries, 2 driver binaries, 1 firmware)".
func mountSummary(mounts []mountReport) string {
	plural := map[string]string{mountLibrary: "driver libraries", mountBinary: "driver binaries"}
	var kinds []string
	count := map[string]int{}
	for _, m := range mounts {
		if count[m.Kind] == 0 {
			kinds = append(kinds, m.Kind)
		}
		count[m.Kind]++
	}
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		name := k
		if p, ok := plural[k]; ok && count[k] > 1 {
			name = p
		}
		parts = append(parts, fmt.Sprintf("%d %s", count[k], name))
	}
	return fmt.Sprintf("%d (%s)", len(mounts), strings.Join(parts, ", "))
}

// explainer prints each note once, the first time a line needs it.
type explainer struct{ seen map[string]bool }

func (e *explainer) explain(b *strings.Builder, key string, needed bool, text string) {
	if !needed || e.seen[key] {
		return
	}
	e.seen[key] = true
	fmt.Fprintf(b, "      note: %s\n", text)
}

func (r *demoReport) writeSkipped(b *strings.Builder) {
	if len(r.Skipped) == 0 {
		return
	}
	fmt.Fprintf(b, "\nnot run: %d seed workloads (gpu-dra-driver demo --workloads FILE with the machine flags it names runs one):\n", len(r.Skipped))
	var reasons []string
	files := map[string][]string{}
	for _, s := range r.Skipped {
		if files[s.Reason] == nil {
			reasons = append(reasons, s.Reason)
		}
		files[s.Reason] = append(files[s.Reason], strings.TrimSuffix(s.File, ".yaml"))
	}
	for _, reason := range reasons {
		fmt.Fprintf(b, "  %s: %s\n", reason, strings.Join(files[reason], ", "))
	}
}

func (r *demoReport) writeTeardown(b *strings.Builder) {
	t := r.Teardown
	failures := len(t.Errors)
	unschedulable := 0
	for _, w := range r.Workloads {
		for _, c := range w.Claims {
			if c.Error != "" {
				failures++
			}
			if c.Unschedulable != "" {
				unschedulable++
			}
		}
	}
	for _, e := range t.Errors {
		fmt.Fprintf(b, "%s\n", e)
	}
	fmt.Fprintf(b, "\nprepared %d claims through the DRA socket, unprepared them: %d CDI specs and %d dynamic MIG instances left, %d failures",
		t.Prepared, t.CDISpecsLeft, t.MIGInstancesLeft, failures)
	if unschedulable > 0 {
		fmt.Fprintf(b, "; %d claims not allocated", unschedulable)
	}
	b.WriteString("\n")
}
