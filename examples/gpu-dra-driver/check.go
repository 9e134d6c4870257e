package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra"
	inputpkg "github.com/gpudra/gpudra/internal/input"
	"github.com/gpudra/gpudra/selectors"
	selcheck "github.com/gpudra/gpudra/selectors/check"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/upgrade"
)

// checkOptions are the inputs of the check command, parsed from flags (or built by a caller).
type checkOptions struct {
	// paths are files, directories (their *.yaml and *.yml files) or "-" for stdin.
	paths  []string
	output string
	// node is the fake machine; explicitMachine says whether a flag chose it. Otherwise each
	// file's "# Target machine:" comment does, and the default machine where there is none.
	node            nodeFlags
	explicitMachine bool
	slicesFile      string
	kubeconfig      string
	policyFile      string
	namespace       string
	apiVersions     []string
	printUpgraded   bool
	// cluster, when set, replaces the API client --kubeconfig builds (tests use a fake).
	cluster kubernetes.Interface
}

func newCheckCmd() *cobra.Command {
	o := checkOptions{}
	cmd := &cobra.Command{
		Use:   "check FILE|DIR|- ...",
		Short: "lint, policy and upgrade hints for manifests, then simulated allocation on a machine",
		Long: `check lints manifests (ResourceClaims, ResourceClaimTemplates, DeviceClasses, Pods and the
workloads that hold them), applies a policy, hints at upgrades to resource.k8s.io/v1, then
allocates every claim with the scheduler's allocator on a machine: each file's "# Target machine:"
comment, or --machine and its flags, or --slices, or a cluster (--kubeconfig).
Objects a default Kubernetes v1.37 API server refuses are findings too: an empty manifest, an
apiVersion it does not serve (beta and alpha versions such as resource.k8s.io/v1beta1; see
--api-versions), an unknown kind, an invalid name or namespace, a negative count. Field names are
case-sensitive and unknown fields are errors, in manifests, --slices and --policy files alike.
ComputeDomains (resource.nvidia.com/v1beta1, served by the CRD of this driver's chart with
computeDomains.enabled) are validated as that CRD does; the channel template a domain names is the
one its controller makes, and the machine publishes the compute-domain plugin's IMEX channel and
daemon devices when its GPUs are all in one NVLink clique (gb200-nvl4). A multi-node job is
checked on the machine's nodes: pods beyond them are unschedulable, with the reason.
It exits 0 when everything passes, 1 on findings, policy violations or unschedulable claims, and
2 when an argument or flag names a file that cannot be read or is not YAML.

` + inputLimitsHelp(),
		Example: `  gpu-dra-driver check examples/deploy/workloads
  gpu-dra-driver check claim.yaml --machine dgx-h100 --consumable-memory
  gpu-dra-driver check --machine gb200-nvl4 examples/deploy/computedomain/01-imex-channel-injection.yaml
  kubectl get resourceclaims -o yaml | gpu-dra-driver check - --kubeconfig ~/.kube/config`,
		Args: minArgs("FILE|DIR|- ..."),
	}
	o.node.register(cmd, allNodeFlags...)
	o.node.registerPassthrough(cmd)
	o.node.registerMIGPublishing(cmd)
	fs := cmd.Flags()
	o.output = "table"
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	completeValues(cmd, "output", "table", "json")
	fs.StringVar(&o.slicesFile, "slices", "", "check against the ResourceSlices (and DeviceClasses) in this `FILE`, e.g. what gpu-dra-driver render printed on a real node")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "check against every ResourceSlice and DeviceClass of the cluster this kubeconfig points at")
	fs.StringVar(&o.policyFile, "policy", "", "policy file (YAML): blockedMIGProfiles, allowedMIGProfiles, maxGPUsPerClaim, requiredSharing")
	fs.StringVar(&o.namespace, "namespace", "default", "namespace of objects that name none (as kubectl apply -n)")
	fs.StringSliceVar(&o.apiVersions, "api-versions", nil, "apiVersions the cluster serves beyond a default Kubernetes v1.37 API server's stable ones (comma-separated GROUP/VERSION, e.g. resource.k8s.io/v1beta2,example.com/v1; ComputeDomain's resource.nvidia.com/v1beta1 is served already)")
	fs.BoolVar(&o.printUpgraded, "print-upgraded", false, "print the inputs upgraded to resource.k8s.io/v1 instead of checking them")
	cmd.RunE = runE(func(cmd *cobra.Command, args []string) error {
		for _, name := range []string{flagNVML, flagMachine, flagMIGConfig, flagDynamicMIG, flagConsumableMemory, "passthrough"} {
			o.explicitMachine = o.explicitMachine || changed(fs, name)
		}
		o.paths = args
		if err := o.validate(); err != nil {
			return usageError(err)
		}
		ok, err := check(cmd.Context(), o, cmd.InOrStdin(), cmd.OutOrStdout())
		if err != nil {
			return err
		}
		if !ok {
			return answerNo(errors.New("check: the answer is no (see the report)"))
		}
		return nil
	})
	return cmd
}

func (o checkOptions) validate() error {
	if len(o.paths) == 0 {
		return errors.New("a FILE, DIR or - is required")
	}
	if err := oneOf("output", o.output, "table", "json"); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return fmt.Errorf("--namespace=%q: %s", o.namespace, strings.Join(errs, "; "))
	}
	if _, err := selcheck.ParseAPIVersions(o.apiVersions); err != nil {
		return fmt.Errorf("--api-versions: %w", err)
	}
	// The node flags are checked even when each file's target machine is used (--node-name).
	if err := o.node.validate(); err != nil {
		return err
	}
	sources := 0
	for _, set := range []bool{o.explicitMachine, o.slicesFile != "", o.kubeconfig != "" || o.cluster != nil} {
		if set {
			sources++
		}
	}
	if sources > 1 {
		return errors.New("choose one machine: --machine (and its flags), --slices or --kubeconfig")
	}
	return nil
}

// input is one manifest to check.
type input struct {
	name string
	data []byte
}

// check checks every input and writes the report; ok is false when any input does not pass.
func check(ctx context.Context, o checkOptions, stdin io.Reader, stdout io.Writer) (bool, error) {
	inputs, err := readInputs(ctx, o.paths, stdin)
	if err != nil {
		return false, err
	}
	if o.printUpgraded {
		return printUpgraded(inputs, stdout)
	}
	policy, err := readPolicy(ctx, o.policyFile)
	if err != nil {
		return false, err
	}
	gvs, _ := selcheck.ParseAPIVersions(o.apiVersions) // checked by validate
	targets := newTargets(o)
	compiler := selectors.NewCompiler()
	var reports []*selcheck.Report
	for _, in := range inputs {
		t, err := targets.forInput(ctx, in)
		if err != nil {
			return false, err
		}
		opts := []selcheck.CheckerOption{selcheck.WithCompiler(compiler), selcheck.WithMachine(t.name, t.slices),
			selcheck.WithDeviceClasses(t.classes...), selcheck.WithNamespace(o.namespace), selcheck.WithAPIVersions(gvs...)}
		if policy != nil {
			opts = append(opts, selcheck.WithPolicy(policy))
		}
		rep, err := selcheck.NewChecker(opts...).Check(ctx, in.name, in.data)
		if err != nil {
			return false, usageError(err) // the input is not YAML at all
		}
		reports = append(reports, rep)
	}
	ok := true
	for _, r := range reports {
		ok = ok && r.OK()
	}
	if o.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return ok, enc.Encode(map[string]any{"ok": ok, "files": reports})
	}
	return ok, writeCheckTable(stdout, reports)
}

// readPolicy reads and parses --policy (nil without one); every failure is a usage error.
func readPolicy(ctx context.Context, path string) (*lint.Policy, error) {
	if path == "" {
		return nil, nil
	}
	data, err := readConfigFile(ctx, path)
	if err != nil {
		return nil, err
	}
	policy, err := lint.ParsePolicy(data)
	if err != nil {
		return nil, usageError(fmt.Errorf("--policy %s: %w", path, err))
	}
	return policy, nil
}

// readInputs reads files, the *.yaml and *.yml files of directories (sorted), and stdin, each
// at most input.ManifestLimit bytes of text; every failure is a usage error naming the input.
func readInputs(ctx context.Context, paths []string, stdin io.Reader) ([]input, error) {
	var out []input
	for _, p := range paths {
		if p == "-" {
			data, err := readStdin(ctx, stdin, inputpkg.ManifestLimit)
			if err != nil {
				return nil, err
			}
			out = append(out, input{"-", data})
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, usageError(err)
		}
		files := []string{p}
		if st.IsDir() {
			files = nil
			for _, pat := range []string{"*.yaml", "*.yml"} {
				m, _ := filepath.Glob(filepath.Join(p, pat))
				files = append(files, m...)
			}
			sort.Strings(files)
			if len(files) == 0 {
				return nil, usageErrorf("%s: no *.yaml or *.yml files", p)
			}
		}
		for _, f := range files {
			data, err := readInputFile(ctx, f, inputpkg.ManifestLimit)
			if err != nil {
				return nil, err
			}
			out = append(out, input{f, data})
		}
	}
	return out, nil
}

func printUpgraded(inputs []input, stdout io.Writer) (bool, error) {
	u := upgrade.NewUpgrader("")
	ok := true
	for i, in := range inputs {
		up, err := u.Upgrade(in.data)
		if up == nil {
			return false, usageError(fmt.Errorf("%s: %w", in.name, err))
		}
		if err != nil {
			ok = false
			for _, e := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(stdout, "# error: %s: %s\n", in.name, e)
			}
		}
		if i > 0 {
			fmt.Fprintln(stdout, "---")
		}
		fmt.Fprintf(stdout, "# upgraded from %s\n", in.name)
		if _, err := stdout.Write(up.Manifest); err != nil {
			return false, err
		}
	}
	return ok, nil
}

// target is the machine a manifest is checked on.
type target struct {
	name    string
	slices  []*resourceapi.ResourceSlice
	classes []*resourceapi.DeviceClass
}

// targets finds and caches the target of each input.
type targets struct {
	o     checkOptions
	cache map[string]*target
}

func newTargets(o checkOptions) *targets { return &targets{o: o, cache: map[string]*target{}} }

func (ts *targets) forInput(ctx context.Context, in input) (*target, error) {
	switch {
	case ts.o.kubeconfig != "" || ts.o.cluster != nil:
		return ts.cached("cluster", func() (*target, error) { return ts.cluster(ctx) })
	case ts.o.slicesFile != "":
		return ts.cached("slices", func() (*target, error) { return slicesTarget(ctx, ts.o.slicesFile) })
	case ts.o.explicitMachine:
		return ts.cached("flags", func() (*target, error) { return machineTarget(ctx, ts.o.node, "") })
	}
	spec := targetMachine(in.data)
	if spec == "" {
		spec = defaultMachine
	}
	return ts.cached(spec, func() (*target, error) {
		nf, err := parseTargetMachine(spec, ts.o.node.nodeName)
		if err != nil {
			return nil, usageError(fmt.Errorf("%s: # Target machine: %s: %w", in.name, spec, err))
		}
		return machineTarget(ctx, nf, spec)
	})
}

func (ts *targets) cached(key string, build func() (*target, error)) (*target, error) {
	if t, ok := ts.cache[key]; ok {
		return t, nil
	}
	t, err := build()
	if err != nil {
		return nil, err
	}
	ts.cache[key] = t
	return t, nil
}

// targetMachine reads the "# Target machine: NAME [flags] (comment)" line of a manifest's
// leading comments (the convention of examples/deploy/workloads).
func targetMachine(data []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "#") {
			if line == "" || line == "---" {
				continue
			}
			return ""
		}
		rest, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(line, "#")), "Target machine:")
		if !ok {
			continue
		}
		rest, _, _ = strings.Cut(rest, " (")
		return strings.TrimSuffix(strings.TrimSpace(rest), ".")
	}
	return ""
}

// parseTargetMachine turns "dgx-a100-80gb --mig-config all-balanced" into node flags.
func parseTargetMachine(spec, nodeName string) (nodeFlags, error) {
	fields := strings.Fields(spec)
	cmd := &cobra.Command{Use: "target"}
	var nf nodeFlags
	nf.register(cmd, flagMachine, flagMIGConfig, flagDynamicMIG, flagConsumableMemory)
	fs := cmd.Flags()
	fs.SetOutput(io.Discard)
	if err := fs.Parse(append([]string{"--machine", fields[0]}, fields[1:]...)); err != nil {
		return nf, err
	}
	if fs.NArg() > 0 {
		return nf, fmt.Errorf("unexpected %q", strings.Join(fs.Args(), " "))
	}
	nf.nodeName = nodeName
	return nf, nf.validate()
}

func describeNode(nf nodeFlags) string {
	s := nf.machine
	if nf.nvmlMode == "real" {
		s = "this node (real NVML)"
	}
	if nf.migConfig != "" {
		s += " --mig-config " + nf.migConfig
	}
	if nf.dynamicMIG {
		s += " --dynamic-mig"
	}
	if nf.consumableMemory {
		s += " --consumable-memory"
	}
	return s
}

// machineTarget renders the slices the driver publishes for a machine, as render does, and those
// of the compute-domain plugin (computeDomainSlices). An empty
// name is the flags in effect on the machine (describeNode).
func machineTarget(ctx context.Context, nf nodeFlags, name string) (*target, error) {
	n, err := nf.open(ctx)
	if err != nil {
		return nil, err
	}
	defer n.close()
	if name == "" {
		name = describeNode(nf.inEffect(n.inv))
	}
	b := gpudra.NewBuilder(nf.builderOptions(n)...)
	res, err := b.Build(nf.nodeName, n.inv)
	if err != nil {
		return nil, err
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), nf.nodeName, res)
	if err != nil {
		return nil, err
	}
	cd, err := computeDomainSlices(nf.nodeName, n.topo)
	if err != nil {
		return nil, err
	}
	return &target{name: name, slices: append(slices, cd...)}, nil
}

// slicesTarget reads ResourceSlices and DeviceClasses from a YAML stream or a JSON List. A file
// that cannot be read or decoded is a usage error (the flag names a bad file).
func slicesTarget(ctx context.Context, path string) (*target, error) {
	data, err := readInputFile(ctx, path, inputpkg.SlicesLimit)
	if err != nil {
		return nil, err
	}
	t := &target{name: "slices " + path}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for i := 0; ; i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, usageErrorf("--slices %s: document %d: %w", path, i, err)
		}
		if err := t.add(raw); err != nil {
			return nil, usageErrorf("--slices %s: document %d: %w", path, i, err)
		}
	}
	if len(t.slices) == 0 {
		return nil, usageError(fmt.Errorf("%s: no ResourceSlices", path))
	}
	return t, nil
}

// add decodes one object (a List adds its items).
func (t *target) add(raw json.RawMessage) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return err
	}
	switch tm.Kind {
	case "List":
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			return err
		}
		for _, it := range l.Items {
			if err := t.add(it); err != nil {
				return err
			}
		}
	case "ResourceSlice":
		s := &resourceapi.ResourceSlice{}
		if err := inputpkg.UnmarshalStrict(raw, s); err != nil {
			return err
		}
		t.slices = append(t.slices, s)
	case "DeviceClass":
		c := &resourceapi.DeviceClass{}
		if err := inputpkg.UnmarshalStrict(raw, c); err != nil {
			return err
		}
		t.classes = append(t.classes, c)
	default:
		return fmt.Errorf("unexpected kind %q (want ResourceSlice, DeviceClass or List)", tm.Kind)
	}
	return nil
}

// cluster lists every ResourceSlice and DeviceClass of the cluster.
func (ts *targets) cluster(ctx context.Context) (*target, error) {
	client := ts.o.cluster
	if client == nil {
		c, err := kubeClient(ctx, ts.o.kubeconfig, 50, 100)
		if err != nil {
			return nil, err
		}
		client = c
	}
	return clusterTarget(ctx, client)
}

// clusterTarget reads a cluster's slices and classes through an API client.
func clusterTarget(ctx context.Context, client kubernetes.Interface) (*target, error) {
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list DeviceClasses: %w", err)
	}
	t := &target{name: "cluster"}
	for i := range slices.Items {
		t.slices = append(t.slices, &slices.Items[i])
	}
	for i := range classes.Items {
		t.classes = append(t.classes, &classes.Items[i])
	}
	if len(t.slices) == 0 {
		return nil, errors.New("the cluster has no ResourceSlices: is a DRA driver running?")
	}
	return t, nil
}

// writeCheckTable writes the reports for people.
func writeCheckTable(w io.Writer, reports []*selcheck.Report) error {
	upgraded, failed := 0, 0
	for _, r := range reports {
		fmt.Fprintf(w, "%s", r.Source)
		if r.Machine != "" {
			fmt.Fprintf(w, "  (machine: %s)", r.Machine)
		}
		verdict := "PASS"
		if !r.OK() {
			verdict, failed = "FAIL", failed+1
		}
		fmt.Fprintf(w, "  %s\n", verdict)
		for _, f := range r.Findings {
			writeFinding(w, f)
		}
		for _, v := range r.Violations {
			fmt.Fprintf(w, "  %-7s %s\n", "POLICY", v)
		}
		if err := writeClaims(w, r.Claims); err != nil {
			return err
		}
		if r.Upgraded != "" {
			upgraded++
		}
	}
	fmt.Fprintf(w, "\n%d files: %d pass, %d fail", len(reports), len(reports)-failed, failed)
	if upgraded > 0 {
		fmt.Fprintf(w, "; %d need an upgrade to resource.k8s.io/v1 (see --print-upgraded)", upgraded)
	}
	fmt.Fprintln(w)
	return nil
}

func writeFinding(w io.Writer, f finding.Finding) {
	where := f.Object
	if f.Field != "" {
		where += " " + f.Field
	}
	if f.Line > 0 {
		where += fmt.Sprintf(":%d:%d", f.Line, f.Column)
	}
	fmt.Fprintf(w, "  %-7s [%s] %s\n          %s\n", strings.ToUpper(string(f.Severity)), f.Rule, where, f.Message)
	if f.Suggestion != "" {
		fmt.Fprintf(w, "          fix: %s\n", f.Suggestion)
	}
}

func writeClaims(w io.Writer, claims []selcheck.ClaimResult) error {
	if len(claims) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CLAIM\tPODS\tRESULT")
	for _, c := range claims {
		result := "UNSCHEDULABLE"
		if c.Allocated {
			var ds []string
			for _, d := range c.Devices {
				ds = append(ds, d.Request+"="+d.Device)
			}
			result = c.Node + ": " + strings.Join(ds, ", ")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Claim, strings.Join(c.Pods, ","), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range claims {
		for _, r := range c.Reasons {
			fmt.Fprintf(w, "    %s: %s\n", c.Claim, r)
		}
	}
	return nil
}
