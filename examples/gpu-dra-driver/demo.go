package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
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
		Args:  noArgs,
	}
	nf.register(cmd, allNodeFlags...)
	_ = cmd.Flags().MarkHidden(flagNVML) // only fake: kept so that --nvml=real says why not
	// The demo shows MIG partitions created on demand unless told otherwise.
	setDefault(cmd.Flags(), flagDynamicMIG, "true")
	cmd.Flags().Lookup(flagDynamicMIG).Usage = "create MIG instances when claims need them: every placement of MIG-capable GPUs is published as a partitionable device " +
		"(--dynamic-mig=false: publish the GPUs' current layout, e.g. from --mig-config)"
	files := cmd.Flags().String("workloads", strings.Join(demoWorkloads, ","), "comma-separated files of examples/deploy/workloads to serve")
	keep := cmd.Flags().Bool("keep", false, "keep the demo's temporary directory (CDI specs, checkpoint) and print its path")
	verbose := cmd.Flags().BoolP("v", "v", false, "show the plugin's and the gRPC servers' logs")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		if nf.nvmlMode == "real" {
			return usageErrorf("--nvml=real: the demo runs on a fake machine only: it creates MIG instances and changes GPU settings")
		}
		ctx := cmd.Context()
		if !*verbose {
			ctx = klog.NewContext(ctx, logr.Discard())
		}
		return runDemo(ctx, &nf, splitList(*files), *keep, cmd.OutOrStdout())
	})
	return cmd
}

func runDemo(ctx context.Context, nf *nodeFlags, files []string, keep bool, stdout io.Writer) error {
	dir, err := os.MkdirTemp("", "gd")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintf(stdout, "demo directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	d, err := newDemo(ctx, nf, dir)
	if err != nil {
		return err
	}
	defer d.stop()
	return d.run(ctx, files, stdout)
}

type demo struct {
	nf       *nodeFlags
	node     *node
	plugin   *draplugin.Plugin
	sim      *simulate.Simulator
	client   *fake.Clientset
	kubelet  *draplugintest.Kubelet
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
	// A fake NVIDIA driver installation (device nodes, libraries) stands in for the host's.
	root, err := cditest.Build(filepath.Join(dir, "driver"), cditest.Layout{GPUs: len(n.inv.GPUs)})
	if err != nil {
		return nil, err
	}
	inst, err := cdi.Discover(root)
	if err != nil {
		return nil, err
	}
	gen, err := cdi.NewGenerator(inst)
	if err != nil {
		return nil, err
	}
	writer, err := cdi.NewWriter(cdi.WithSpecDir(d.cdiDir))
	if err != nil {
		return nil, err
	}
	var uuids []string
	for _, g := range n.inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	// Host actions (time slices, compute mode, MPS daemons) are recorded by an in-memory host.
	d.host = sharingtest.NewFakeHost(uuids...)
	mgr := sharing.NewManager(gpudra.DefaultDriverName, sharing.WithTimeSlicer(d.host), sharing.WithComputeModeSetter(d.host),
		sharing.WithMPSDaemons(d.host), sharing.WithMPSRoot(filepath.Join(dir, "mps")))
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("demo\n"), 0o600); err != nil {
		return nil, err
	}
	d.plugin, err = draplugin.New(ctx, draplugin.Config{
		NodeName: nf.nodeName, NVML: n.nvml, Inventory: n.inv, StateDir: filepath.Join(dir, "state"), BootIDPath: bootID,
		CDIGenerator: gen, CDIWriter: writer, Sharing: mgr, Slices: nf.builderOptions(n),
		Health: draplugin.HealthConfig{Disabled: true},
	})
	if err != nil {
		return nil, err
	}
	res, err := d.plugin.Resources(ctx)
	if err != nil {
		return nil, err
	}
	slices, err := gpudra.ResourceSlices(d.plugin.DriverName(), nf.nodeName, res)
	if err != nil {
		return nil, err
	}
	d.sim = simulate.New(nf.nodeName, selectors.DeviceClasses(d.plugin.DriverName()), slices)
	d.client = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nf.nodeName, UID: "demo-node"}})
	regDir, pluginDir := filepath.Join(dir, "reg"), filepath.Join(dir, "plugin")
	for _, p := range []string{regDir, pluginDir} {
		if err := os.MkdirAll(p, 0o750); err != nil {
			return nil, err
		}
	}
	if _, err := d.plugin.Start(ctx, draplugin.StartConfig{KubeClient: d.client, RegistrarDir: regDir, PluginDir: pluginDir,
		NoPublish: true, NoHealthMonitor: true, Options: []kubeletplugin.Option{kubeletplugin.GRPCVerbosity(-1)}}); err != nil {
		return nil, err
	}
	// Register and connect exactly as kubelet does: the registration socket tells where the
	// DRA service listens.
	d.kubelet, err = draplugintest.ConnectKubelet(ctx, filepath.Join(regDir, d.plugin.DriverName()+"-reg.sock"), d.plugin.DriverName())
	if err != nil {
		return nil, err
	}
	d.instancesAtStart = d.migInstances()
	return d, nil
}

func (d *demo) stop() {
	if d.kubelet != nil {
		d.kubelet.Close()
	}
	d.plugin.Stop()
	d.node.close()
}

func (d *demo) run(ctx context.Context, files []string, w io.Writer) error {
	inv := d.node.inv
	fmt.Fprintf(w, "gpudra demo on fake machine %s (%d GPUs, driver %s), node %s, dynamic MIG %v\n",
		d.nf.machine, len(inv.GPUs), inv.DriverVersion, d.nf.nodeName, d.nf.dynamicMIG)
	res, err := d.plugin.Resources(ctx)
	if err != nil {
		return err
	}
	var devices, counters int
	for _, s := range res.Slices {
		devices += len(s.Devices)
		counters += len(s.SharedCounters)
	}
	fmt.Fprintf(w, "published: %d devices, %d counter sets; DeviceClasses gpu.nvidia.com, mig.nvidia.com\n\n", devices, counters)

	uidSeq := 0
	failures := 0
	for _, file := range files {
		file = strings.TrimSpace(file)
		data, err := deploy.Files.ReadFile("workloads/" + file)
		if err != nil {
			return fmt.Errorf("workload %s: %w", file, err)
		}
		wl, err := simulate.LoadWorkload(data, func(int) types.UID {
			uidSeq++
			return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", uidSeq))
		})
		if err != nil {
			return fmt.Errorf("workload %s: %w", file, err)
		}
		fmt.Fprintf(w, "== %s\n", file)
		for _, claim := range wl.Claims {
			if err := d.serveClaim(ctx, w, claim); err != nil {
				failures++
				fmt.Fprintf(w, "  %s: %v\n", claim.Name, err)
			}
		}
	}
	return d.teardown(ctx, w, failures)
}

// serveClaim allocates a claim with the scheduler's allocator, prepares it through the DRA
// socket, and injects the returned CDI devices into an OCI spec.
func (d *demo) serveClaim(ctx context.Context, w io.Writer, claim *resourceapi.ResourceClaim) error {
	allocated, err := d.sim.Allocate(ctx, claim)
	if err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	if _, err := d.client.ResourceV1().ResourceClaims(allocated.Namespace).Create(ctx, allocated, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("store claim: %w", err)
	}
	resp, err := d.kubelet.Prepare(ctx, allocated)
	if err != nil {
		return fmt.Errorf("NodePrepareResources: %w", err)
	}
	r := resp.Claims[string(allocated.UID)]
	if r == nil || r.Error != "" {
		return fmt.Errorf("prepare: %s", r.GetError())
	}
	d.prepared = append(d.prepared, allocated)
	var ids, names []string
	for _, dev := range r.Devices {
		names = append(names, dev.DeviceName)
		ids = append(ids, dev.CdiDeviceIds...)
	}
	fmt.Fprintf(w, "  %s: allocated %s\n", allocated.Name, strings.Join(names, ", "))
	spec, err := d.inject(ids)
	if err != nil {
		return err
	}
	var nodes []string
	for _, n := range spec.Linux.Devices {
		if strings.HasPrefix(n.Path, "/dev/nvidia") && n.Path != "/dev/nvidiactl" && !strings.HasPrefix(n.Path, "/dev/nvidia-uvm") && n.Path != "/dev/nvidia-modeset" {
			nodes = append(nodes, fmt.Sprintf("%s (%d:%d)", n.Path, n.Major, n.Minor))
		}
	}
	var env []string
	for _, e := range spec.Process.Env {
		if strings.HasPrefix(e, "CUDA_MPS_") || strings.HasPrefix(e, "NVIDIA_VISIBLE_DEVICES") {
			env = append(env, e)
		}
	}
	sort.Strings(env)
	fmt.Fprintf(w, "    CDI: %s\n    container gets: %s", strings.Join(ids, " "), strings.Join(nodes, ", "))
	if len(env) > 0 {
		fmt.Fprintf(w, "; env %s", strings.Join(env, " "))
	}
	fmt.Fprintf(w, "; %d mounts\n", len(spec.Mounts))
	d.reportHost(w, allocated)
	return nil
}

// reportHost prints the host settings (time slice, compute mode, MPS daemon) that preparing
// the claim changed on the in-memory host.
func (d *demo) reportHost(w io.Writer, claim *resourceapi.ResourceClaim) {
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
	if len(notes) > 0 {
		fmt.Fprintf(w, "    host: %s\n", strings.Join(notes, "; "))
	}
}

// inject runs the container runtime's CDI code over the specs the plugin wrote.
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

func (d *demo) teardown(ctx context.Context, w io.Writer, failures int) error {
	resp, err := d.kubelet.Unprepare(ctx, d.prepared...)
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	for uid, r := range resp.Claims {
		if r.Error != "" {
			failures++
			fmt.Fprintf(w, "unprepare %s: %s\n", uid, r.Error)
		}
	}
	left, err := os.ReadDir(d.cdiDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	instances := d.migInstances() - d.instancesAtStart
	fmt.Fprintf(w, "\nprepared %d claims through the DRA socket, unprepared them: %d CDI specs and %d dynamic MIG instances left, %d failures\n",
		len(d.prepared), len(left), instances, failures)
	if failures > 0 {
		return fmt.Errorf("demo: %d claims failed", failures)
	}
	return nil
}

// migInstances counts the GPU instances on the fake machine.
func (d *demo) migInstances() int {
	n := 0
	for i := range d.node.inv.GPUs {
		n += len(d.node.machine.GPUInstances(i))
	}
	return n
}
