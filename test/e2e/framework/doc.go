// Package framework runs a small real Kubernetes control plane and DRA kubelet plugins on
// one machine, for gpudra's end-to-end tests. Linux only: it relies on unix sockets and kills
// its children when the test binary dies.
//
// # Control plane
//
// StartControlPlane starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager
// (built by package binaries) on 127.0.0.1 with free ports: client-certificate
// authentication, Node and RBAC authorization, ServiceAccount tokens signed and verified, the
// PodNodeSelector admission plugin, and every controller but those that evict pods from Nodes
// without a kubelet (DisabledControllers). CreateReadyNode registers a Node as a kubelet would.
// WithFeatureGates runs the components with feature gates changed (an older or gated cluster);
// WithSchedulerFlags and WithDeferredScheduler (then StartScheduler) serve throughput tests;
// Process.Usage reads a component's CPU time and memory for benchmarks.
//
// # Installing and running a driver
//
// RenderChart and LintChart use Helm's Go library on a chart directory; Applier applies the
// objects with server-side apply. StartDriver runs the first container of a rendered
// DaemonSet as a local process for one node: hostPath volumes become directories, the
// downward API is filled in, and the process is authenticated by a kubeconfig
// (ServiceAccountToken, WriteKubeconfig) rather than in-cluster credentials. Package
// fakekubelet then calls the plugin's sockets.
//
// The common path:
//
//	cp, err := framework.StartControlPlane(ctx, bins, dir)
//	defer cp.Stop()
//	client, err := kubernetes.NewForConfig(cp.Admin)
//	node, err := framework.CreateReadyNode(ctx, client, "node-a", labels)
//	objs, err := framework.RenderChart(chartDir, "v1.37.2", framework.Release{Name: "drv", Namespace: "drv"})
//	err = applier.Apply(ctx, "drv", objs...)
package framework
