// Package resourcepool turns the devices a driver publishes on one node, of any kind, into
// the ResourceSlices of one pool: chunked within the API's per-slice limits, shared counters in
// slices of their own, names checked the way the API server checks them. It is the generic half
// of the slice builder: gpudra.Builder.Build makes GPU devices and hands them here, and a driver
// for another kind of device (see package draplugin/exclusive) does the same with its own
// devices. It does no I/O and imports nothing of NVML.
//
// # Build and render a pool
//
//	pool, err := resourcepool.New(nodeName, devices)                            // chunked to the API limits
//	objs, err := resourcepool.ResourceSlices("accel.example.com", nodeName, pool) // complete objects
//
// A running driver does not create the objects itself: the kubelet-plugin helper
// (k8s.io/dynamic-resource-allocation/kubeletplugin) publishes the pool's slices; ResourceSlices
// is for rendering them (kubectl apply, offline allocation).
package resourcepool
