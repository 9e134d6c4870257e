// Command gpu-dra-driver is gpudra's reference DRA driver for NVIDIA GPUs. Every offline command
// works without a GPU on an embedded fake machine (default dgx-a100-40gb) unless --nvml=real is
// given. serve, the kubelet plugin, is the exception: it drives the node's real GPUs unless
// --nvml=fake is given, and then needs no NVIDIA driver (tests; --fake-control exposes the fake
// machine to them).
//
//	gpu-dra-driver serve      the kubelet plugin (the Helm chart runs it as a DaemonSet)
//	gpu-dra-driver render     DeviceClasses and ResourceSlices as multi-document YAML
//	gpu-dra-driver inventory  GPUs, MIG devices and capacity as a table (or -o yaml|json)
//	gpu-dra-driver mig ...    MIG profiles, layout validation, layouts, mig-parted config checks
//	gpu-dra-driver check ...  lint, policy, upgrade hints and simulated allocation of manifests
//
// The command is a thin assembly of the gpudra packages; see the repository README.
package main
