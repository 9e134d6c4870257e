// Package vfio hands a GPU to a virtual machine (KubeVirt, Kata) by binding it, and every other
// function of its IOMMU group, to the vfio-pci driver through sysfs, and gives it back to the
// NVIDIA driver afterwards. It is cgo-free and knows nothing of NVML or Kubernetes.
//
// A Binder works on a GPU named by its PCI address. Bind finds the GPU's IOMMU group
// (/sys/bus/pci/devices/<addr>/iommu_group), refuses a GPU that is in use, and for each function
// of the group writes "vfio-pci" to its driver_override, unbinds it from its driver
// (driver/unbind) and asks the kernel to probe it again (/sys/bus/pci/drivers_probe); it then
// waits for the group's device node /dev/vfio/<group>. Unbind clears each driver_override,
// unbinds the function from vfio-pci, probes it again, and binds it explicitly to the driver it
// had before Bind (nvidia for the GPU, snd_hda_intel for its audio function) where the probe
// did not. Both are idempotent, and both undo what they did when a step fails.
//
// What Bind can tell from the host that a GPU is in use, and refuses:
//
//   - MIG instances: a directory per GPU instance under
//     /proc/driver/nvidia/capabilities/gpu<minor>/mig/ (the minor from
//     /proc/driver/nvidia/gpus/<addr>/information);
//   - open handles: a process holding /dev/nvidia<minor> open (listed in /proc/<pid>/fd), which
//     covers CUDA processes, MPS control and server daemons, and nvidia-persistenced;
//   - a function of the group bound to a driver that is not a GPU's (nvidia, nvidia-drm,
//     snd_hda_intel, xhci_hcd, nvidia-gpu, vfio-pci): binding the group would take that device
//     from the host.
//
// A caller that knows more (the kubelet plugin knows which claims use the GPU) adds its own
// check with WithInUseCheck. PCI bridges in the group are left alone, as vfio-pci requires.
//
// Every path is built from a canonical PCI address (internal/pciaddr) and from names read back
// from sysfs that are checked to be plain file names, so no input reaches outside the roots. The
// roots (sysfs, /dev, /proc) are options, and all file access goes through the FS interface, so
// tests run on gputest.PCIHost, a fake host tree whose driver bindings react to the writes as
// the kernel does.
package vfio
