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
// dynamic MIG (1g.5gb; all profiles, four profiles, and with the publishing options for
// MIG-only nodes), consumable memory (8Gi of a GPU), and upstream-basic: the devices, class and
// half pre-fill of upstream scheduler_perf's SchedulingWithResourceClaimTemplate, the anchor
// every other kind is given as a ratio to.
//
// # What it reports
//
// kube-scheduler's CPU time per pod is the primary figure (a shared machine's load changes it
// much less than wall-clock rates), with the API server's, etcd's and kube-controller-manager's
// beside it; then pods/s. -scale.repeat runs every kind that many times, interleaved, and the
// summary gives medians and each kind's ratio to upstream-basic's median.
//
// # Patched schedulers
//
// -scale.patch=FILE (make bench-e2e-scale SCALE_PATCHED=1 for test/e2e/patches/pool-cache.patch)
// builds a second kube-scheduler from the pinned sources with the patch applied
// (framework/binaries Set.Patched), before any run, and runs every kind with it right after the
// kind's unpatched run, as "<kind>+<patch name>"; the summary adds each patched kind's ratio to
// its unpatched median (docs/upstream-pool-cache.md).
//
// # Running it
//
//	make bench-e2e                                   # from the repository root, full size
//	cd test/e2e && go test -run '^$' -bench . -benchtime 1x ./scale \
//		-scale.nodes=50 -scale.pods=200 -scale.kinds=dynamic-mig   # a quick look
//
// The markdown table printed at the end is what docs/benchmarks.md records.
package scale
