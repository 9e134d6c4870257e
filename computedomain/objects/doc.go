// Package objects builds the Kubernetes objects of the ComputeDomain contract that both halves
// of the compute-domain driver and offline tools agree on: the devices a node's plugin publishes
// (Devices, in the node's NVLink clique from Clique) and the ResourceClaimTemplate the controller
// makes for a domain's channel (ChannelTemplate). It links no controller library, so that a
// tool such as the reference driver's check command can show what a cluster would do without
// running the controller or the plugin.
//
// # Devices and templates
//
//	clique, err := objects.Clique(topo.GPUs)
//	if errors.Is(err, objects.ErrNoClique) {
//		return nil // the node publishes no IMEX device
//	}
//	devices := objects.Devices(clique)            // channel-0 and daemon-0
//	tmpl := objects.ChannelTemplate(domain, clique) // what the domain's pods name
package objects
