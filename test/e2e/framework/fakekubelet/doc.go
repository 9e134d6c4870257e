// Package fakekubelet calls a DRA kubelet plugin over its real sockets the way kubelet does, so
// a test can drive a plugin process without a kubelet or a container runtime.
//
// # Registration
//
// Kubelet watches its plugin registration directory (/var/lib/kubelet/plugins_registry) for
// sockets, calls the Registration service's GetInfo on each, checks that the plugin is a
// DRAPlugin speaking a DRA version it knows, reports the result with NotifyRegistrationStatus,
// and then dials the plugin's DRA socket (GetInfo's Endpoint). Sockets lists the candidates,
// Register does the rest for one of them.
//
// # Prepare and unprepare
//
// Plugin.Prepare and Plugin.Unprepare send NodePrepareResources and NodeUnprepareResources of
// k8s.io/kubelet/pkg/apis/dra/v1 for the claims of a pod (namespace, name and UID; the plugin
// reads everything else from the API server). As kubelet does, a top-level gRPC error fails
// the whole call and a claim's own Error fails that claim only; ClaimErrors collects both.
// Plugin.WatchHealth opens the DRAResourceHealth stream kubelet reads device health from.
//
// The common path:
//
//	regs, err := fakekubelet.Sockets(registrarDir)
//	p, err := fakekubelet.Register(ctx, regs[0])
//	defer p.Close()
//	resp, err := p.Prepare(ctx, fakekubelet.Claim{Namespace: "ns", Name: "claim", UID: "uid"})
//	for uid, r := range resp.Claims {
//		fmt.Println(uid, r.Devices[0].CdiDeviceIds, r.Error)
//	}
//
// The package depends only on gRPC and k8s.io/kubelet's published APIs, so it can move to any
// module.
package fakekubelet
