// Package serving is how a kubelet plugin serves through the kubelet-plugin helper of
// k8s.io/dynamic-resource-allocation: where (Endpoint, HelperOptions, CheckSocketPaths for the
// unix socket path limit), how (Concurrently: one claim per goroutine) and what it publishes
// (DriverResources, Publish, and PublishFirst, which creates a fresh node's first
// ResourceSlices without waiting for the helper's controller).
package serving
