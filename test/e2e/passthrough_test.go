package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// TestVFIOPassthrough (issue 32): a driver serving with --passthrough publishes vfio devices;
// the real scheduler gives a virtual machine's claim (class vfio.gpu.nvidia.com) and a
// container's claim (class gpu.nvidia.com) different GPUs; preparing the VM claim through the
// driver's socket binds that GPU's IOMMU group to vfio-pci on the driver's fake PCI host and
// writes a CDI spec with its /dev/vfio nodes, and unpreparing it gives the GPU back to nvidia.
func TestVFIOPassthrough(t *testing.T) {
	ctx := context.Background()
	n := suite.StartNode(t, NodeSpec{Name: "vfio-l4", Machine: "l4x8", ExtraArgs: []string{"--passthrough"}})
	ns := shortName("vfio", n.Spec.Name)
	vm := claimSpec("vm", "vfio.gpu.nvidia.com", "", nil)
	ctr := claimSpec("ctr", "gpu.nvidia.com", "", nil)
	createPodsWithClaims(t, n, ns, []*resourceapi.ResourceClaim{vm, ctr}, podUsing("a-vm", "vm"), podUsing("b-ctr", "ctr"))
	pods, err := waitScheduled(ctx, ns, 2, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	vmClaim, ctrClaim := pods[0].Claims[0], pods[1].Claims[0]
	vmDev, ctrDev := vmClaim.Status.Allocation.Devices.Results[0].Device, ctrClaim.Status.Allocation.Devices.Results[0].Device
	if !strings.HasSuffix(vmDev, "-vfio") || strings.TrimSuffix(vmDev, "-vfio") == ctrDev {
		t.Fatalf("the VM got %s and the container %s: want a vfio device and another GPU", vmDev, ctrDev)
	}
	slices, err := Slices(ctx, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	dev := Devices(slices)[vmDev]
	addr := *dev.Attributes["resource.kubernetes.io/pciBusID"].StringValue
	group := *dev.Attributes["iommuGroup"].IntValue
	state := n.Driver.ArgValue("--state-dir")
	if state == "" {
		state = n.Driver.ArgValue("--plugin-dir")
	}
	driverOf := func(a string) string {
		link, _ := os.Readlink(filepath.Join(state, "fake-pci", "sys/bus/pci/devices", a, "driver"))
		return filepath.Base(link)
	}
	if _, err := n.prepare(ctx, vmClaim); err != nil {
		t.Fatalf("prepare the VM claim: %v", err)
	}
	audio := strings.TrimSuffix(addr, ".0") + ".1"
	if driverOf(addr) != "vfio-pci" || driverOf(audio) != "vfio-pci" {
		t.Errorf("after prepare: GPU %s on %q, audio on %q; want vfio-pci", addr, driverOf(addr), driverOf(audio))
	}
	data, err := os.ReadFile(filepath.Join(n.Driver.ArgValue("--cdi-root"), specFileOf(t, n, string(vmClaim.UID))))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Devices) != 1 || len(spec.Devices[0].ContainerEdits.DeviceNodes) != 1 ||
		spec.Devices[0].ContainerEdits.DeviceNodes[0].Path != "/dev/vfio/"+strconv.FormatInt(group, 10) ||
		!strings.Contains(strings.Join(spec.ContainerEdits.Env, " "), "PCI_RESOURCE_NVIDIA_COM_L4="+addr) {
		t.Errorf("VM claim's CDI spec:\n%s", data)
	}
	if err := n.unprepare(ctx, vmClaim); err != nil {
		t.Fatal(err)
	}
	if driverOf(addr) != "nvidia" || driverOf(audio) != "snd_hda_intel" {
		t.Errorf("after unprepare: GPU on %q, audio on %q; want nvidia, snd_hda_intel", driverOf(addr), driverOf(audio))
	}
}

func specFileOf(t *testing.T, n *TestNode, uid string) string {
	t.Helper()
	specs, err := n.CDISpecs()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if strings.Contains(s, uid) {
			return s
		}
	}
	t.Fatalf("no CDI spec for claim %s among %v", uid, specs)
	return ""
}

// TestVFIOKilledWhileBound (issue 32): the driver is killed (SIGKILL) after it bound a virtual
// machine's GPU to vfio-pci and answered the prepare, and restarted as kubelet restarts a
// crashed plugin container. The GPU stays bound and the claim prepared (its CDI spec is there;
// kubelet's retried prepare gets the same device IDs); the unprepare after the restart gives
// the GPU back to nvidia and removes the spec.
func TestVFIOKilledWhileBound(t *testing.T) {
	ctx := context.Background()
	n := suite.StartNode(t, NodeSpec{Name: "vfio-kill", Machine: "l4x8", ExtraArgs: []string{"--passthrough"}})
	ns := shortName("vfio", n.Spec.Name)
	createPodsWithClaims(t, n, ns, []*resourceapi.ResourceClaim{claimSpec("vm", "vfio.gpu.nvidia.com", "", nil)}, podUsing("a-vm", "vm"))
	pods, err := waitScheduled(ctx, ns, 1, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	claim := pods[0].Claims[0]
	published, err := Slices(ctx, n.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	addr := *Devices(published)[claim.Status.Allocation.Devices.Results[0].Device].Attributes["resource.kubernetes.io/pciBusID"].StringValue
	state := n.Driver.ArgValue("--state-dir")
	if state == "" {
		state = n.Driver.ArgValue("--plugin-dir")
	}
	driverOf := func() string {
		link, _ := os.Readlink(filepath.Join(state, "fake-pci", "sys/bus/pci/devices", addr, "driver"))
		return filepath.Base(link)
	}
	first, err := n.prepare(ctx, claim)
	if err != nil {
		t.Fatalf("prepare the VM claim: %v", err)
	}
	n.crash(t)
	if got := driverOf(); got != "vfio-pci" {
		t.Errorf("after the restart: GPU %s on %q, want still vfio-pci", addr, got)
	}
	specFileOf(t, n, string(claim.UID))
	again, err := n.prepare(ctx, claim)
	if err != nil {
		t.Fatalf("kubelet's retried prepare after the restart: %v", err)
	}
	ids := func(r *drapbv1.NodePrepareResourcesResponse) []string {
		var out []string
		for _, d := range r.Claims[string(claim.UID)].GetDevices() {
			out = append(out, d.CdiDeviceIds...)
		}
		return out
	}
	if got, want := ids(again), ids(first); len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("the retried prepare answered CDI devices %v, the first %v", got, want)
	}
	if err := n.unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if got := driverOf(); got != "nvidia" {
		t.Errorf("after unprepare: GPU %s on %q, want nvidia", addr, got)
	}
	if specs, err := n.CDISpecs(); err != nil || len(specs) != 0 {
		t.Errorf("CDI specs after unprepare: %v (%v)", specs, err)
	}
}
