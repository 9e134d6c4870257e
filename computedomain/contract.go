package computedomain

import "strconv"

// The compatibility contract with NVIDIA's compute-domain driver: names that manifests and
// tools written for it rely on (DESIGN.md, "Compatibility contract").
const (
	// DriverName is the DRA driver of IMEX channels and daemons.
	DriverName = "compute-domain.nvidia.com"
	// ChannelDeviceClass selects a node's default IMEX channel (type channel, id 0).
	ChannelDeviceClass = "compute-domain-default-channel.nvidia.com"
	// DaemonDeviceClass selects a node's IMEX daemon device (type daemon).
	DaemonDeviceClass = "compute-domain-daemon.nvidia.com"

	// AttrType is the device attribute that says what a device is: TypeChannel or TypeDaemon.
	AttrType = "type"
	// AttrID is the device attribute with the channel's (or daemon's) number.
	AttrID = "id"
	// TypeChannel is the type of an IMEX channel device.
	TypeChannel = "channel"
	// TypeDaemon is the type of an IMEX daemon device.
	TypeDaemon = "daemon"
)

// This project's additions, outside the contract.
const (
	// AttrCliqueID is the device attribute with the node's NVLink clique, "<cluster UUID>.<clique
	// ID>" from the GPUs' fabric info (the GPU driver's nvlinkDomain). A domain's channel claim
	// template selects one clique through it.
	AttrCliqueID = "cliqueID"
	// NodeLabel marks a node that serves a domain; its value is the domain's UID. The controller
	// keeps it on exactly the nodes whose channel the scheduler allocated to a claim of the
	// domain; the domain's daemon DaemonSet selects nodes by it.
	NodeLabel = "resource.nvidia.com/computeDomain"
	// ChannelDevDir is where IMEX channel device nodes live, on the host and in containers.
	ChannelDevDir = "/dev/nvidia-caps-imex-channels"
	// ChannelProcName is the character device's name in /proc/devices, whose major number the
	// channel device nodes carry (the minor is the channel number).
	ChannelProcName = "nvidia-caps-imex-channels"
	// DaemonConfigDir is where an IMEX daemon container finds the directory the node plugin
	// prepared for it (its config, its nodes file, its log).
	DaemonConfigDir = "/imexd"
)

// The environment of an IMEX daemon container: the controller's DaemonSet sets the first five,
// the node plugin's daemon claim (its CDI edits) the domain's UID again and the clique.
const (
	// EnvNodeName holds the pod's node (field spec.nodeName).
	EnvNodeName = "NODE_NAME"
	// EnvPodIP holds the pod's address (field status.podIP), which the daemon reports.
	EnvPodIP = "POD_IP"
	// EnvDomainUID holds the domain's UID.
	EnvDomainUID = "COMPUTE_DOMAIN_UUID"
	// EnvDomainName holds the domain's name.
	EnvDomainName = "COMPUTE_DOMAIN_NAME"
	// EnvDomainNamespace holds the domain's namespace.
	EnvDomainNamespace = "COMPUTE_DOMAIN_NAMESPACE"
	// EnvCliqueID holds the node's NVLink clique (AttrCliqueID).
	EnvCliqueID = "COMPUTE_DOMAIN_CLIQUE"
)

// ChannelDevicePath is the device node of IMEX channel n ("/dev/nvidia-caps-imex-channels/channel0").
func ChannelDevicePath(n int) string {
	return ChannelDevDir + "/channel" + strconv.Itoa(n)
}
