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
// # Patched binaries
//
// Set.Patched builds some of the binaries (kube-scheduler, for the scale bench) from the same
// pinned sources with a unified diff applied (test/e2e/patches): the modules the patch names are
// copied from the module cache into <cache root>/k8s-<version>-patch-<name>-<hash>/src, patched
// there with git apply, and built through that directory's go.work, which uses test/e2e's module
// and replaces the patched modules with the copies. The hash covers the Kubernetes version, the
// patched modules' versions and the patch, so the unpatched cache and go.mod are never touched
// and an unchanged patch reuses its copies and binaries. The same go.work runs upstream's own
// tests against the patched sources (GOWORK=<dir>/go.work go test k8s.io/...).
//
// # Common path
//
// From a directory of the test/e2e module:
//
//	set, err := binaries.Resolve(ctx)
//	err = set.Build(ctx, os.Stdout, false) // prints one line per binary, with timings
//	apiserver := set.Path(binaries.KubeAPIServer)
//	patched, err := set.Patched(ctx, os.Stdout, "patches/pool-cache.patch", binaries.KubeScheduler)
//	scheduler := patched.Path(binaries.KubeScheduler)
package binaries
