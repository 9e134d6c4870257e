// Package nodeplugin is the kubelet plugin of compute-domain.nvidia.com, the IMEX half of a
// ComputeDomain (package computedomain): a Driver for package draplugin/exclusive, which brings
// the kubelet registration, ResourceSlices, the crash-safe checkpoint, CDI specs and
// reconciliation.
//
// # Devices
//
// A node whose GPUs are all registered in one NVLink clique (fabric state COMPLETED, status
// SUCCESS, the same cluster UUID and clique ID: Clique) publishes two devices, each for one
// claim at a time: ChannelDevice (channel-0) and DaemonDevice (daemon-0), with the attributes
// computedomain.AttrType (channel or daemon), computedomain.AttrID (0) and
// computedomain.AttrCliqueID ("<cluster UUID>.<clique ID>"). Any other node publishes none.
//
// # Preparing a channel
//
// A workload's channel claim carries the opaque ComputeDomainChannelConfig its domain's
// controller put into the claim template (decoded strictly: unknown fields, another apiVersion
// or kind, and a domainID that is not a UID are errors that name the field). Prepare finds the
// domain by UID in the claim's namespace, refuses it unless the domain chose the node's clique,
// and waits, for at most Config.ReadyTimeout, until the domain's status has the node's daemon
// Ready (and the domain Ready when spec.numNodes > 0). Then it makes the channel device nodes
// (channel 0, or every channel in AllocationMode All) and gives the container them and
// NVIDIA_VISIBLE_DEVICES=void. A wait that runs out fails with the domain, the node and what is
// missing, and kubelet retries. The plugin changes nothing in the cluster: the domain's
// controller labels the node computedomain.NodeLabel=<domain UID> as soon as the scheduler
// allocates the node's channel to a claim of the domain (and removes the label when no claim
// holds it), which brings the domain's IMEX daemon pod; a failed or retried prepare therefore
// never takes the daemon away while it starts.
//
// # Preparing a daemon
//
// The IMEX daemon pod's claim carries ComputeDomainDaemonConfig. Prepare creates the daemon's
// directory <state dir>/domains/<domain UID> (0700) and mounts it at
// computedomain.DaemonConfigDir, with COMPUTE_DOMAIN_UUID, COMPUTE_DOMAIN_CLIQUE (the node's
// clique) and NVIDIA_VISIBLE_DEVICES=void.
//
// # Unpreparing
//
// A daemon's prepare records the claim's domain under the state directory before it creates the
// directory, so that Unprepare, which the plugin also calls after a failed or interrupted
// prepare, removes the directory unless another claim of the same domain still holds it. A
// channel leaves nothing to undo: its device nodes are the host's.
//
// # What it drives
//
// Small interfaces keep the host and the cluster replaceable: Fabric (FabricFunc over
// nvmltopology.GPUs, on real NVML or a gputest machine), Domains (ClientDomains, a
// controller-runtime client) and ChannelDevices (HostChannels:
// mknod under /dev with the major of /proc/devices). The package imports no NVML binding and
// builds with CGO_ENABLED=0.
//
// The common path:
//
//	scheme, err := nodeplugin.NewScheme()
//	c, err := client.New(restConfig, client.Options{Scheme: scheme})
//	driver, err := nodeplugin.New(nodeplugin.Config{
//		NodeName: node, StateDir: stateDir,
//		Fabric:   nodeplugin.FabricFunc(func(context.Context) ([]topology.GPU, error) { return nvmltopology.GPUs(lib) }),
//		Domains:  nodeplugin.NewClientDomains(c),
//		Channels: nodeplugin.NewHostChannels("", ""),
//	})
//	plugin, err := exclusive.New(ctx, exclusive.Config{DriverName: computedomain.DriverName,
//		NodeName: node, Driver: driver, StateDir: stateDir, CDIWriter: writer})
//	report, err := plugin.Start(ctx, exclusive.StartConfig{KubeClient: clientset})
//	go driver.WatchFabric(ctx, nodeplugin.DefaultFabricPoll, plugin.Publish) // a tray that joins its clique later
package nodeplugin
