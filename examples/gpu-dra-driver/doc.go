// Command gpu-dra-driver is gpudra's reference DRA driver for NVIDIA GPUs. Every offline command
// works without a GPU on an embedded fake machine (default dgx-a100-40gb) unless --nvml=real is
// given. serve, the kubelet plugin, is the exception: it drives the node's real GPUs unless
// --nvml=fake is given, and then needs no NVIDIA driver (tests; --fake-control exposes the fake
// machine to them).
//
//	gpu-dra-driver demo       the whole pipeline in one process, with a report (or -o json)
//	gpu-dra-driver serve      the kubelet plugin (the Helm chart runs it as a DaemonSet)
//	gpu-dra-driver render     DeviceClasses and ResourceSlices as multi-document YAML
//	gpu-dra-driver inventory  GPUs, MIG devices and capacity as a table (or -o yaml|json)
//	gpu-dra-driver mig ...    MIG profiles, layout validation, layouts, mig-parted config checks
//	gpu-dra-driver topo       the topology matrix; --best N picks the best-connected GPUs
//	gpu-dra-driver check ...  lint, policy, upgrade hints and simulated allocation of manifests
//	gpu-dra-driver version    module version, commit, Go version, the host's NVML library
//	gpu-dra-driver completion bash|zsh|fish|powershell
//
// The command line follows kubectl's conventions (cobra and pflag): --flag or --flag=value,
// flags before or after arguments, "help CMD" and --help on stdout. Exit status: 0 success,
// 1 the answer is "no" (an invalid layout or configuration, an unschedulable claim, check
// findings), 2 usage error, 3 runtime failure.
//
// The command is a thin assembly of the gpudra packages; see the repository README.
package main
