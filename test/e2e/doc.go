// Package e2e is gpudra's end-to-end tier: the reference driver (examples/gpu-dra-driver) on a
// real control plane.
//
// TestMain builds or reuses etcd, kube-apiserver, kube-scheduler and kube-controller-manager
// (framework/binaries), builds the driver with `make build`, starts the control plane on
// 127.0.0.1 (framework.StartControlPlane), and installs the Helm chart
// deployments/helm/gpu-dra-driver rendered with Helm's Go library. Each test then creates
// Ready Nodes, one `gpu-dra-driver serve` process per node run with the chart's DaemonSet
// arguments and the chart's ServiceAccount token, and acts as kubelet on the plugin's sockets
// (framework/fakekubelet). No kubelet and no container runtime run: Pods are scheduled and
// bound, never started.
//
// TestNegotiationOnAGatedServer starts a second, smaller control plane whose components run with
// the optional DRA slice feature gates off (framework.WithFeatureGates) and checks that serve
// degrades to what that server keeps.
//
// Run it with `make e2e` from the repository root; E2E_RUN selects tests and E2E_KEEP=1 keeps
// the cluster directory (logs of every component and driver) even when the tests pass.
//
// # Benchmarks
//
// BenchmarkPrepareLatency times NodePrepareResources and NodeUnprepareResources through the
// DRA socket, as kubelet calls them, for claims the real scheduler allocated: serve beside
// dra-example-driver's kubelet plugin (pinned in tools/dra-example-driver). Package scale
// measures kube-scheduler's pods/s on hundreds of nodes. `make bench-e2e` runs both and each
// prints a markdown table for docs/benchmarks.md.
package e2e
