// Package binaries builds and caches the control-plane binaries of the e2e tier: etcd,
// kube-apiserver, kube-scheduler and kube-controller-manager, compiled from the module versions
// test/e2e/go.mod pins (k8s.io/kubernetes with its staging modules replaced by the published
// v0.x.y modules, and go.etcd.io/etcd/server/v3 behind the module's own cmd/etcd main).
//
// Binaries live in <cache root>/k8s-<version>/ (cache root: $GPUDRA_E2E_CACHE or
// ~/.cache/gpudra-e2e). A cached binary is reused when its --version output names the pinned
// version; anything else is rebuilt. Builds write to a temporary name and rename, so an
// interrupted build never leaves a truncated binary behind.
//
// The common path (from a directory of the test/e2e module):
//
//	set, err := binaries.Resolve(ctx)
//	err = set.Build(ctx, os.Stdout, false) // prints one line per binary, with timings
//	apiserver := set.Path(binaries.KubeAPIServer)
package binaries
