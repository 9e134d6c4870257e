// Package kubelettest is a fake kubelet and a fake API server for testing any kubelet DRA
// plugin (a *draplugin.Plugin, an *exclusive.Plugin, a driver's own kubeletplugin.DRAPlugin)
// through the surface kubelet really uses. It imports nothing of NVML and builds without cgo;
// package draplugin/draplugintest (a fake GPU node) and package
// draplugin/exclusive/exclusivetest (a fake node for any other device) build on it.
//
// # Kubelet
//
// ConnectKubelet registers a plugin as kubelet does: GetInfo on its registration socket
// (RegistrationSocket names it), a check that it is a DRA plugin of the expected driver serving
// the v1 DRA service, NotifyRegistrationStatus, then a connection to the DRA endpoint the plugin
// named. The Kubelet then calls NodePrepareResources and NodeUnprepareResources over the unix
// socket (package draplugin/kubeletclient, for programs that drive a plugin through its sockets
// without this package's fake API server). Prepare and Unprepare instead call a plugin's methods directly, as the kubelet-plugin
// helper does after it has read the claim, for tests that need no sockets.
//
// # API server
//
// NewFakeClient is client-go's fake clientset with what a kubelet plugin's start needs:
// discovery of resource.k8s.io/v1 and generateName for the ResourceSlices the helper creates.
// NewAPIClient also passes every ResourceSlice written through a filter, as an API server with
// some feature gates off drops fields.
//
// # Claims
//
// Claim builds an unallocated claim for one device of a DeviceClass; UID derives a stable UID
// from a name.
//
// # What it does not model
//
// The fake API server validates nothing, has no server-side apply and no admission; claims are
// what the test put into it. The fake kubelet does not watch the registration directory (it is
// told the socket), does not retry, and does not check that the claims it sends are reserved
// for a pod on the node.
package kubelettest
