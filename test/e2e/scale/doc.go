// Package scale measures how fast the real kube-scheduler places pods with DRA claims on the
// ResourceSlices gpudra publishes, at cluster scale.
//
// # What runs
//
// BenchmarkScheduling starts a fresh control plane per kind of claim (etcd, kube-apiserver,
// kube-controller-manager from framework.StartControlPlane, kube-scheduler deferred), creates
// Ready Nodes with no kubelet, publishes each node's ResourceSlices as the library builds them
// (gpudra.Builder and gpudra.ResourceSlices on a gpu/gputest fake machine: no driver process per
// node), creates one ResourceClaim and one pod using it per pod, and only then starts
// kube-scheduler, so that the measured time is the scheduler's alone: from its first bind to its
// last. Pods are bound and never run. Kinds: exclusive GPUs, static MIG (all-balanced, 1g.5gb),
// dynamic MIG (1g.5gb) and consumable memory (8Gi of a GPU).
//
// # Running it
//
//	make bench-e2e                                   # from the repository root, full size
//	cd test/e2e && go test -run '^$' -bench . -benchtime 1x ./scale \
//		-scale.nodes=50 -scale.pods=200 -scale.kinds=dynamic-mig   # a quick look
//
// The markdown table printed at the end is what docs/benchmarks.md records.
package scale
