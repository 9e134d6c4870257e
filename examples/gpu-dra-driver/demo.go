package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/kubeletclient"
	"github.com/gpudra/gpudra/examples/deploy"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
	"github.com/gpudra/gpudra/simulate"
)

// demoWorkloads are the seed workloads the demo serves by default: exclusive, two GPUs, shared
// claims, time-slicing, MPS and dynamic MIG 1g/2g/3g on one DGX A100.
var demoWorkloads = []string{
	"01-exclusive-gpu.yaml", "02-two-gpus.yaml", "12-shared-claim-two-containers.yaml",
	"15-time-slicing-interval.yaml", "16-mps-limits.yaml",
	"05-mig-1g.yaml", "06-mig-2g.yaml", "07-mig-3g.yaml",
}

func newDemoCmd() *cobra.Command {
	var nf nodeFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "the whole pipeline in one process: slices, allocation, prepare over the DRA socket, CDI injection",
		Long: `demo plays the whole path of GPU claims in one process, with no GPU and no cluster: a fake
machine's ResourceSlices, the seed workloads of examples/deploy/workloads allocated by the
scheduler's allocator, prepared by the plugin core over its DRA socket as kubelet calls it, the
CDI edits injected into an OCI spec as a container runtime does, then unprepared. It reports
what each container gets, what changed on the host, and which seed workloads it did not run
and why. It exits 1 when a claim could not be allocated and 3 when preparing one failed.`,
		Example: `  gpu-dra-driver demo
  gpu-dra-driver demo --machine l4x8 --workloads 03-time-slicing.yaml,04-mps.yaml
  gpu-dra-driver demo --dynamic-mig=false --mig-config all-balanced -o json`,
		Args: noArgs,
	}
	nf.register(cmd, allNodeFlags...)
	nf.registerMIGPublishing(cmd)
	_ = cmd.Flags().MarkHidden(flagNVML) // only fake: kept so that --nvml=real says why not
	_ = cmd.Flags().MarkHidden(flagDriverRoot)
	// The demo shows MIG partitions created on demand unless told otherwise.
	setDefault(cmd.Flags(), flagDynamicMIG, "true")
	cmd.Flags().Lookup(flagDynamicMIG).Usage = "create MIG instances when claims need them: every placement of MIG-capable GPUs is published " +
		"as a partitionable device (--dynamic-mig=false: publish the GPUs' current layout, e.g. from --mig-config)"
	files := cmd.Flags().String("workloads", strings.Join(demoWorkloads, ","), "comma-separated files of examples/deploy/workloads to serve")
	keep := cmd.Flags().Bool("keep", false, "keep the demo's temporary directory (CDI specs, checkpoint) and print its path on stderr")
	verbose := cmd.Flags().BoolP("v", "v", false, "show the plugin's and the gRPC servers' logs")
	output := outputFlag(cmd, "output format: text (a report for people) or json (for scripts)", "text", "json")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		if nf.nvmlMode == "real" {
			return usageErrorf("--nvml=real: the demo runs on a fake machine only: it creates MIG instances and changes GPU settings")
		}
		if err := oneOf("output", *output, "text", "json"); err != nil {
			return err
		}
		list, err := demoFiles(*files)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if !*verbose {
			ctx = klog.NewContext(ctx, logr.Discard())
		}
		rep, err := runDemo(ctx, &nf, list, *keep, cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		if err := writeDemo(cmd.OutOrStdout(), *output, rep); err != nil {
			return err
		}
		return rep.err()
	})
	return cmd
}

// demoFiles checks --workloads against the seed workloads.
func demoFiles(list string) ([]string, error) {
	files, err := splitList("workloads", list)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, usageErrorf("--workloads is empty")
	}
	all, err := seedWorkloads()
	if err != nil {
		return nil, err
	}
	for i, f := range files {
		if !slices.Contains(all, f) {
			return nil, usageErrorf("--workloads: %q is not a file of examples/deploy/workloads (%s)", f, strings.Join(all, ", "))
		}
		if slices.Contains(files[:i], f) {
			return nil, usageErrorf("--workloads: %q is listed twice; each workload runs once", f)
		}
	}
	return files, nil
}

func runDemo(ctx context.Context, nf *nodeFlags, files []string, keep bool, stderr io.Writer) (*demoReport, error) {
	dir, err := os.MkdirTemp("", "gd")
	if err != nil {
		return nil, err
	}
	if keep {
		fmt.Fprintf(stderr, "demo directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	d, err := newDemo(ctx, nf, dir)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	return d.run(ctx, files)
}

type demo struct {
	nf       *nodeFlags
	node     *node
	inst     *cdi.Installation
	plugin   *draplugin.Plugin
	sim      *simulate.Simulator
	client   *demoClient
	kubelet  *kubeletclient.Kubelet
	cdiDir   string
	host     *sharingtest.FakeHost
	prepared []*resourceapi.ResourceClaim
	// instancesAtStart are the MIG instances a --mig-config created before the demo.
	instancesAtStart int
}

func newDemo(ctx context.Context, nf *nodeFlags, dir string) (*demo, error) {
	n, err := nf.open(ctx)
	if err != nil {
		return nil, err
	}
	d := &demo{nf: nf, node: n, cdiDir: filepath.Join(dir, "cdi")}
	if err := d.newPlugin(ctx, dir); err != nil {
		n.close()
		return nil, err
	}
	if err := d.start(ctx, dir); err != nil {
		d.stop()
		return nil, err
	}
	d.instancesAtStart = d.migInstances()
	return d, nil
}

// newPlugin builds the plugin core on a fake driver installation and an in-memory host.
func (d *demo) newPlugin(ctx context.Context, dir string) error {
	// A fake NVIDIA driver installation (device nodes, libraries) stands in for the host's.
	root, err := cditest.Build(filepath.Join(dir, "driver"), cditest.Layout{GPUs: len(d.node.inv.GPUs)})
	if err != nil {
		return err
	}
	if d.inst, err = cdi.Discover(root); err != nil {
		return err
	}
	gen, err := cdi.NewGenerator(d.inst)
	if err != nil {
		return err
	}
	writer, err := cdi.NewWriter(cdi.WithSpecDir(d.cdiDir))
	if err != nil {
		return err
	}
	var uuids []string
	for _, g := range d.node.inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	// Host actions (time slices, compute mode, MPS daemons) are recorded by an in-memory host.
	d.host = sharingtest.NewFakeHost(uuids...)
	mgr := sharing.NewManager(gpudra.DefaultDriverName, sharing.WithTimeSlicer(d.host), sharing.WithComputeModeSetter(d.host),
		sharing.WithMPSDaemons(d.host), sharing.WithMPSRoot(filepath.Join(dir, "mps")))
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("demo\n"), 0o600); err != nil {
		return err
	}
	d.plugin, err = draplugin.New(ctx, draplugin.Config{
		NodeName: d.nf.nodeName, NVML: d.node.nvml, Inventory: d.node.inv, StateDir: filepath.Join(dir, "state"), BootIDPath: bootID,
		CDIGenerator: gen, CDIWriter: writer, Sharing: mgr, SliceOptions: d.nf.builderOptions(d.node),
		Health: draplugin.HealthConfig{Disabled: true},
	})
	return err
}

// start publishes the slices to the simulated scheduler, starts the plugin's sockets and
// connects to them as kubelet does: the registration socket tells where the DRA service listens.
func (d *demo) start(ctx context.Context, dir string) error {
	res, err := d.plugin.Resources(ctx)
	if err != nil {
		return err
	}
	slices, err := gpudra.ResourceSlices(d.plugin.DriverName(), d.nf.nodeName, res)
	if err != nil {
		return err
	}
	d.sim = simulate.New(d.nf.nodeName, selectors.DeviceClasses(d.plugin.DriverName()), slices)
	d.client, err = newDemoClient(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: d.nf.nodeName, UID: "demo-node"}})
	if err != nil {
		return err
	}
	regDir, pluginDir := filepath.Join(dir, "reg"), filepath.Join(dir, "plugin")
	for _, p := range []string{regDir, pluginDir} {
		if err := os.MkdirAll(p, 0o750); err != nil {
			return err
		}
	}
	if _, err := d.plugin.Start(ctx, draplugin.StartConfig{KubeClient: d.client, RegistrarDir: regDir, PluginDir: pluginDir,
		NoPublish: true, NoHealthMonitor: true, Options: []kubeletplugin.Option{kubeletplugin.GRPCVerbosity(-1)}}); err != nil {
		return err
	}
	d.kubelet, err = kubeletclient.Connect(ctx, kubeletclient.RegistrationSocket(regDir, d.plugin.DriverName()), d.plugin.DriverName())
	return err
}

func (d *demo) stop() {
	if d.kubelet != nil {
		d.kubelet.Close()
	}
	if d.plugin != nil {
		d.plugin.Stop()
	}
	d.node.close()
}

func (d *demo) run(ctx context.Context, files []string) (*demoReport, error) {
	rep, err := d.header(ctx)
	if err != nil {
		return nil, err
	}
	uidSeq := 0
	for _, file := range files {
		data, err := deploy.Files.ReadFile("workloads/" + file)
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", file, err)
		}
		wl, err := simulate.LoadWorkload(data, func(int) types.UID {
			uidSeq++
			return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", uidSeq))
		})
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", file, err)
		}
		h := parseHeader(data)
		wr := workloadReport{File: file, Shows: h.shows, Target: h.target}
		for _, claim := range wl.Claims {
			wr.Claims = append(wr.Claims, d.serveClaim(ctx, claim))
		}
		rep.Workloads = append(rep.Workloads, wr)
	}
	if rep.Skipped, err = skippedWorkloads(files, rep.Setup); err != nil {
		return nil, err
	}
	rep.Teardown, err = d.teardown(ctx)
	return rep, err
}

// header reports the machine, the options and what the plugin publishes.
func (d *demo) header(ctx context.Context) (*demoReport, error) {
	inv := d.node.inv
	rep := &demoReport{Machine: d.nf.machine, GPUs: len(inv.GPUs), Product: productNames(inv), DriverVersion: inv.DriverVersion,
		Node: d.nf.nodeName, DynamicMIG: d.nf.inEffect(inv).dynamicMIG, DynamicMIGFlag: d.nf.dynamicMIG,
		ConsumableMemory: d.nf.consumableMemory, MIGConfig: d.nf.migConfig, Setup: describeNode(d.nf.inEffect(inv))}
	res, err := d.plugin.Resources(ctx)
	if err != nil {
		return nil, err
	}
	p := &rep.Published
	for _, s := range res.Slices {
		p.CounterSets += len(s.SharedCounters)
		for _, dev := range s.Devices {
			p.Devices++
			if t := dev.Attributes[gpudra.AttrType].StringValue; t != nil && *t == gpudra.DeviceTypeMIG {
				p.MIGDevices++
			} else {
				p.FullGPUs++
			}
		}
	}
	for _, c := range selectors.DeviceClasses(d.plugin.DriverName()) {
		p.DeviceClasses = append(p.DeviceClasses, c.Name)
	}
	return rep, nil
}

// serveClaim allocates a claim with the scheduler's allocator, prepares it through the DRA
// socket, and injects the returned CDI devices into an OCI spec.
func (d *demo) serveClaim(ctx context.Context, claim *resourceapi.ResourceClaim) claimReport {
	cr := claimReport{Name: claim.Name}
	allocated, err := d.sim.Allocate(ctx, claim)
	if err != nil {
		cr.Unschedulable = fmt.Sprintf("not allocated: %v", err)
		return cr
	}
	for _, r := range allocated.Status.Allocation.Devices.Results {
		cr.Devices = append(cr.Devices, r.Device)
	}
	if _, err := d.client.ResourceV1().ResourceClaims(allocated.Namespace).Create(ctx, allocated, metav1.CreateOptions{}); err != nil {
		cr.Error = fmt.Sprintf("store claim: %v", err)
		return cr
	}
	resp, err := d.kubelet.Prepare(ctx, allocated)
	if err != nil {
		cr.Error = fmt.Sprintf("NodePrepareResources: %v", err)
		return cr
	}
	r := resp.Claims[string(allocated.UID)]
	if r == nil || r.Error != "" {
		cr.Error = fmt.Sprintf("prepare: %s", r.GetError())
		return cr
	}
	d.prepared = append(d.prepared, allocated)
	for _, dev := range r.Devices {
		cr.CDIDevices = append(cr.CDIDevices, dev.CdiDeviceIds...)
	}
	spec, err := d.inject(cr.CDIDevices)
	if err != nil {
		cr.Error = err.Error()
		return cr
	}
	d.describeContainer(&cr, spec)
	cr.Host = d.hostChanges(allocated)
	return cr
}

// describeContainer records what the container gets from the injected spec.
func (d *demo) describeContainer(cr *claimReport, spec *oci.Spec) {
	for _, n := range spec.Linux.Devices {
		node := deviceNode{Path: n.Path, Major: n.Major, Minor: n.Minor}
		if isControlNode(n.Path) {
			cr.ControlNodes = append(cr.ControlNodes, node)
		} else {
			cr.DeviceNodes = append(cr.DeviceNodes, node)
		}
	}
	for _, e := range spec.Process.Env {
		if strings.HasPrefix(e, "CUDA_MPS_") || strings.HasPrefix(e, "NVIDIA_VISIBLE_DEVICES") {
			cr.Env = append(cr.Env, e)
		}
	}
	sort.Strings(cr.Env)
	kinds := map[string]string{}
	for kind, files := range map[string][]cdi.File{mountLibrary: d.inst.Libraries, mountBinary: d.inst.Binaries, mountFirmware: d.inst.Firmware} {
		for _, f := range files {
			kinds[f.Path] = kind
		}
	}
	for _, m := range spec.Mounts {
		kind, ok := kinds[m.Destination]
		if !ok {
			kind = otherMountKind(m.Destination)
		}
		cr.Mounts = append(cr.Mounts, mountReport{Kind: kind, ContainerPath: m.Destination, HostPath: m.Source})
	}
}

// hostChanges are the host settings (time slice, compute mode, MPS daemon) that preparing the
// claim changed on the in-memory host.
func (d *demo) hostChanges(claim *resourceapi.ResourceClaim) []string {
	st := d.host.State()
	var notes []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		for _, g := range d.node.inv.GPUs {
			if gpudra.GPUDeviceName(g.Minor) != r.Device {
				continue
			}
			if ts := st.TimeSlices[g.UUID]; ts != 0 {
				notes = append(notes, fmt.Sprintf("time slice %d on %s", ts, r.Device))
			}
			if cm, ok := st.ComputeModes[g.UUID]; ok && cm != sharing.ComputeModeDefault {
				notes = append(notes, fmt.Sprintf("compute mode %s on %s", cm, r.Device))
			}
		}
	}
	if _, ok := st.Daemons[string(claim.UID)]; ok {
		notes = append(notes, "MPS control daemon running")
	}
	return notes
}

// inject runs the container runtime's CDI code over the specs the plugin wrote, on a spec whose
// image sets NVIDIA_VISIBLE_DEVICES=all as the CUDA images do.
func (d *demo) inject(ids []string) (*oci.Spec, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(d.cdiDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI cache: %w", err)
	}
	spec := &oci.Spec{Process: &oci.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		return nil, fmt.Errorf("CDI inject %v: %w", ids, err)
	}
	return spec, nil
}

func (d *demo) teardown(ctx context.Context) (teardownReport, error) {
	t := teardownReport{Prepared: len(d.prepared)}
	resp, err := d.kubelet.Unprepare(ctx, d.prepared...)
	if err != nil {
		return t, fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	for uid, r := range resp.Claims {
		if r.Error != "" {
			t.Errors = append(t.Errors, fmt.Sprintf("unprepare %s: %s", uid, r.Error))
		}
	}
	left, err := os.ReadDir(d.cdiDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return t, err
	}
	t.CDISpecsLeft = len(left)
	t.MIGInstancesLeft = d.migInstances() - d.instancesAtStart
	return t, nil
}

// migInstances counts the GPU instances on the fake machine.
func (d *demo) migInstances() int {
	n := 0
	for i := range d.node.inv.GPUs {
		n += len(d.node.machine.GPUInstances(i))
	}
	return n
}
