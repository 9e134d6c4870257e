// Package kubenode runs a real Kubernetes node on this machine for the node tier (make
// e2e-node): containerd v2 with runc and a machine-local pod network (PodNetwork: a bridge, no
// route off the machine), and kubelet v1.37 registered with a
// framework.ControlPlane, with container images assembled from local files (no daemon, no
// registry) and a fake NVIDIA driver root whose /dev holds real character-device nodes.
//
// What differs from a production node, and why, is listed in docs/install.md under "The node
// tier": cgroup v1 without QoS cgroups, no eviction, a pod network that ends at the machine
// (the API server reached through a Forwarder on the bridge's address), no kube-proxy.
//
// The common path:
//
//	bins, _ := set.BuildNode(ctx, os.Stdout, false)
//	_ = kubenode.WriteArchive(archive, kubenode.StaticImage(kubenode.SandboxImage, pauseBinary))
//	node, _ := kubenode.Start(ctx, cp, bins, kubenode.Config{Name: "node-1", Dir: dir, Images: archive})
//	defer node.Stop()
package kubenode
