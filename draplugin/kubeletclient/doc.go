// Package kubeletclient talks to a DRA kubelet plugin's sockets as kubelet does: it registers
// the plugin through its registration socket and calls NodePrepareResources and
// NodeUnprepareResources on the DRA socket the plugin names. It is the gRPC half of package
// draplugin/kubelettest (whose Kubelet is this package's), kept apart so that a program can
// drive a plugin through its sockets without linking client-go's fake clientset, which
// kubelettest's fake API server needs: the reference driver's `demo` does, and the `serve`
// in the same binary then carries none of that fake's code or package initialization.
//
// # Registering and calling a plugin
//
// Connect calls GetInfo on the registration socket (RegistrationSocket names it in kubelet's
// registration directory), checks that the plugin is a DRA plugin of the expected driver
// serving the v1 DRA service, calls NotifyRegistrationStatus and dials the endpoint the plugin
// named:
//
//	k, err := kubeletclient.Connect(ctx, kubeletclient.RegistrationSocket(registrarDir, "gpu.nvidia.com"), "gpu.nvidia.com")
//	if err != nil {
//		return err
//	}
//	defer k.Close()
//	resp, err := k.Prepare(ctx, claim) // the plugin's helper reads claim from the API server
//
// # What it does not model
//
// It does not watch the registration directory (it is told the socket), does not retry a
// failed call, and does not check that the claims it sends are reserved for a pod on the node.
package kubeletclient
