package draplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/pciaddr"
	"github.com/gpudra/gpudra/vfio"
)

// Passthrough: a claim for vfio devices (gpudra.WithPassthrough) binds each GPU's IOMMU group
// to vfio-pci through Config.Passthrough. The intent, with the GPU's PCI address, IOMMU group
// and inventory entry, is recorded (PrepareStarted) before the first sysfs write; a crash
// anywhere after it is undone by the rollback of reconciliation, which unbinds (Unbind is
// idempotent and finishes a half-done bind from any state). Unprepare unbinds after the CDI spec
// is gone. A claim's devices are all vfio devices or none: a virtual machine's launcher gets
// /dev/vfio nodes and no NVIDIA files.

// anyVFIO reports whether the claim passes a GPU through.
func anyVFIO(st checkpoint.ClaimState) bool {
	return slices.ContainsFunc(st.Devices, func(d checkpoint.PreparedDevice) bool { return d.VFIO != nil })
}

// planVFIO records what binding the GPU of a vfio device needs, refusing a GPU another claim
// holds: the scheduler's counters keep the GPU and its vfio device apart, but a claim
// force-deleted and reallocated before its unprepare must not take a GPU from under a
// container.
func (a *attempt) planVFIO(d prepDevice, pd *checkpoint.PreparedDevice) error {
	dev := d.result.Device
	if a.p.binder == nil {
		return stepErr(StepBindVFIO, dev, errors.New("passthrough is not configured (draplugin.Config.Passthrough is nil)"))
	}
	if other, taken := a.p.claimOnGPU(d.GPU.UUID, a.st.UID); taken {
		return stepErr(StepBindVFIO, dev, fmt.Errorf("GPU %s is prepared for claim %s: it cannot be passed through until that claim is unprepared", d.GPU.UUID, other))
	}
	g := *d.GPU
	g.MIGDevices = nil
	addr, err := pciaddr.Canonical(g.PCIBusID)
	if err != nil {
		return stepErr(StepBindVFIO, dev, fmt.Errorf("GPU %s: %w", g.UUID, err))
	}
	entry, err := json.Marshal(g)
	if err != nil {
		return stepErr(StepCheckpoint, dev, fmt.Errorf("record GPU %s: %w", g.UUID, err))
	}
	pd.VFIO = &checkpoint.VFIOBinding{PCIAddress: addr, IOMMUGroup: d.Passthrough.IOMMUGroup,
		ResourceName: ResourceName(g.ProductName), GPU: entry}
	return nil
}

// checkVFIOClaim refuses a claim that mixes vfio devices with others, or asks for sharing of a
// GPU passed through.
func checkVFIOClaim(st checkpoint.ClaimState, hostChanges bool) error {
	if !anyVFIO(st) {
		return nil
	}
	for _, d := range st.Devices {
		if d.VFIO == nil {
			return stepErr(StepResolve, d.Device, errors.New("a claim that passes GPUs through to a virtual machine (vfio devices) cannot also have GPUs or MIG devices for containers: use two claims"))
		}
	}
	if hostChanges {
		return stepErr(StepPlanSharing, "", errors.New("sharing (time-slicing, MPS) does not apply to GPUs passed through to a virtual machine: remove the GpuConfig from the claim or its DeviceClass"))
	}
	return nil
}

// claimOnGPU returns another claim the checkpoint records on the GPU.
func (p *Plugin) claimOnGPU(gpuUUID, except string) (string, bool) {
	for _, c := range p.store.List() {
		if c.UID != except && slices.Contains(claimGPUs(c), gpuUUID) {
			return c.UID, true
		}
	}
	return "", false
}

// bindVFIO is the passthrough step of prepare: it binds the GPU of each vfio device.
func (a *attempt) bindVFIO(ctx context.Context) error {
	for i, d := range a.ours {
		v := a.st.Devices[i].VFIO
		if v == nil {
			continue
		}
		a.p.health.setPassthrough(d.GPU.UUID, true)
		g, err := a.p.binder.Bind(ctx, v.PCIAddress)
		if err != nil {
			return a.fail(StepBindVFIO, d.result.Device, err)
		}
		if g.ID != v.IOMMUGroup {
			return a.fail(StepBindVFIO, d.result.Device, fmt.Errorf("GPU %s is in IOMMU group %d, but was published in group %d: restart the plugin to publish it again", v.PCIAddress, g.ID, v.IOMMUGroup))
		}
		v.Major, v.Minor = g.Major, g.Minor
		klog.FromContext(ctx).V(2).Info("Bound GPU to vfio-pci", "device", d.result.Device, "pciAddress", v.PCIAddress, "iommuGroup", g.ID)
		if err := a.p.crashPoint(testhooks.CrashAfterVFIOBound, a.claim.UID); err != nil {
			return err
		}
	}
	return nil
}

// writeVFIOCDI writes the CDI spec of a passthrough claim.
func (a *attempt) writeVFIOCDI() error {
	spec, err := vfioSpec(a.p.gen.Kind(), a.st)
	if err != nil {
		return a.fail(StepGenerateCDI, "", err)
	}
	for i := range a.st.Devices {
		a.st.Devices[i].CDIDeviceIDs = []string{spec.DeviceIDs[a.st.Devices[i].Device]}
	}
	if _, err := a.p.writer.Write(spec); err != nil {
		return a.fail(StepWriteCDI, "", err)
	}
	return a.p.crashPoint(testhooks.CrashAfterCDIWritten, a.claim.UID)
}

// vfioSpec is the CDI spec of a passthrough claim: /dev/vfio/vfio for the claim, and per device
// its group's node /dev/vfio/<group>. The environment follows KubeVirt's device-plugin
// convention, which virt-launcher reads to find a host device's PCI address:
// PCI_RESOURCE_<resource name, upper-cased, every character but letters and digits an
// underscore>=<address>[,<address>...], here with the resource name "nvidia.com/<product>"
// (ResourceName), one variable per product; NVIDIA_VISIBLE_DEVICES=void keeps the NVIDIA
// container runtime from adding GPUs of its own.
func vfioSpec(kind string, st checkpoint.ClaimState) (*cdi.ClaimSpec, error) {
	common := cdispec.ContainerEdits{Env: []string{cdi.VisibleDevicesVoid}, DeviceNodes: []*cdispec.DeviceNode{
		{Path: vfio.ControlDevicePath, Type: "c", Major: vfio.ControlMajor, Minor: vfio.ControlMinor}}}
	byResource := map[string][]string{}
	devs := make([]cdi.DeviceEdits, 0, len(st.Devices))
	for _, d := range st.Devices {
		if d.VFIO == nil {
			return nil, fmt.Errorf("device %s: not a vfio device", d.Device)
		}
		byResource[d.VFIO.ResourceName] = append(byResource[d.VFIO.ResourceName], d.VFIO.PCIAddress)
		// The node's numbers as the bind found them: the runtime then need not read the node
		// (it stats a node given without them).
		node := &cdispec.DeviceNode{Path: fmt.Sprintf("/dev/vfio/%d", d.VFIO.IOMMUGroup)}
		if d.VFIO.Major != 0 {
			node.Type, node.Major, node.Minor = "c", d.VFIO.Major, d.VFIO.Minor
		}
		devs = append(devs, cdi.DeviceEdits{Name: d.Device, Edits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{node}}})
	}
	names := make([]string, 0, len(byResource))
	for name := range byResource {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		common.Env = append(common.Env, PCIResourceEnv(name)+"="+strings.Join(byResource[name], ","))
	}
	return cdi.NewClaimSpec(kind, st.UID, common, devs)
}

// ResourceName is the KubeVirt resource name of a GPU product: "nvidia.com/" and the product
// name without its "NVIDIA " prefix, spaces and dashes turned into underscores, upper-cased
// ("NVIDIA A100-SXM4-40GB" → "nvidia.com/A100_SXM4_40GB"). A KubeVirt permittedHostDevices
// entry with this resourceName and externalResourceProvider: true lets virtual machines use it.
func ResourceName(productName string) string {
	p := strings.TrimPrefix(strings.TrimSpace(productName), "NVIDIA ")
	return "nvidia.com/" + strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return unicode.ToUpper(r)
		}
		return '_'
	}, p)
}

// PCIResourceEnv is the environment variable KubeVirt's virt-launcher reads the PCI addresses of
// a resource from: "PCI_RESOURCE_" and the resource name upper-cased with every character but
// letters and digits an underscore ("nvidia.com/A100_SXM4_40GB" →
// "PCI_RESOURCE_NVIDIA_COM_A100_SXM4_40GB").
func PCIResourceEnv(resourceName string) string {
	return "PCI_RESOURCE_" + strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return unicode.ToUpper(r)
		}
		return '_'
	}, resourceName)
}

// unbindVFIO gives the GPUs of a claim's vfio devices back to their driver, last first. A GPU
// not bound (the bind never started, or a retry after a crash) is not an error.
func (p *Plugin) unbindVFIO(ctx context.Context, st checkpoint.ClaimState) error {
	for i := len(st.Devices) - 1; i >= 0; i-- {
		d := st.Devices[i]
		if d.VFIO == nil {
			continue
		}
		if p.binder == nil {
			return stepErr(StepUnbindVFIO, d.Device, fmt.Errorf("the checkpoint records GPU %s as bound to vfio-pci, but passthrough is not configured (draplugin.Config.Passthrough): it stays bound", d.VFIO.PCIAddress))
		}
		if err := p.binder.Unbind(ctx, d.VFIO.PCIAddress); err != nil {
			return stepErr(StepUnbindVFIO, d.Device, err)
		}
		klog.FromContext(ctx).V(2).Info("Gave GPU back from vfio-pci", "device", d.Device, "pciAddress", d.VFIO.PCIAddress)
		if err := p.crashPoint(testhooks.CrashAfterVFIOUnbound, types.UID(st.UID)); err != nil {
			return err
		}
	}
	return nil
}

// restoreBound adds to the inventory the GPUs the checkpoint records as passed through that
// NVML no longer lists (a GPU bound to vfio-pci is gone from the NVIDIA driver), so that they
// stay published and their claims resolvable, and keeps health monitoring off them: NVML would
// report them lost. Health monitoring of a GPU given back resumes at the plugin's next start.
func (p *Plugin) restoreBound(ctx context.Context) error {
	inv := *p.inv
	inv.GPUs = slices.Clone(p.inv.GPUs)
	added := 0
	for _, c := range p.store.List() {
		for _, d := range c.Devices {
			if d.VFIO == nil {
				continue
			}
			p.health.setPassthrough(d.GPUUUID, true)
			if slices.ContainsFunc(inv.GPUs, func(g gpu.GPU) bool { return g.UUID == d.GPUUUID }) || d.VFIO.GPU == nil {
				continue
			}
			var g gpu.GPU
			if err := json.Unmarshal(d.VFIO.GPU, &g); err != nil || g.UUID != d.GPUUUID {
				return fmt.Errorf("claim %s device %s: the recorded GPU entry is unreadable or not GPU %s: %v", c.UID, d.Device, d.GPUUUID, err)
			}
			inv.GPUs = append(inv.GPUs, g)
			added++
			klog.FromContext(ctx).Info("Publishing a GPU bound to vfio-pci, which NVML does not list, from the checkpoint", "gpu", g.UUID, "pciAddress", d.VFIO.PCIAddress)
		}
	}
	if added == 0 {
		return nil
	}
	slices.SortFunc(inv.GPUs, func(a, b gpu.GPU) int { return a.Index - b.Index })
	devices, err := newDeviceIndex(p.builder, &inv)
	if err != nil {
		return err
	}
	p.inv, p.devices = &inv, devices
	p.health.attach(p.devices, p.migDevicesOf, p.onHealthChange)
	return nil
}
