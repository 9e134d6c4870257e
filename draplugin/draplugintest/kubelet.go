package draplugintest

import (
	"cmp"
	"context"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
)

// Kubelet talks to a DRA plugin's sockets as kubelet does (kubelettest.Kubelet). Build one
// with ConnectKubelet or Node.Serve.
type Kubelet = kubelettest.Kubelet

// ConnectKubelet registers a plugin as kubelet does (kubelettest.ConnectKubelet): GetInfo on
// the registration socket, a check that the plugin is a DRA plugin of driverName serving the v1
// DRA service, the registration confirmed, the endpoint the plugin named dialled.
func ConnectKubelet(ctx context.Context, registrationSocket, driverName string) (*Kubelet, error) {
	return kubelettest.ConnectKubelet(ctx, registrationSocket, driverName)
}

// Server is a plugin started by Node.Serve.
type Server struct {
	// Kubelet is connected to the plugin's sockets.
	*Kubelet
	// Client is the fake API client the plugin uses; it holds the node, the claims given to
	// Serve and the published ResourceSlices.
	Client *fake.Clientset
	// Report is what the start-up reconciliation did.
	Report *draplugin.ReconcileReport
	plugin *draplugin.Plugin
}

// Stop closes the kubelet connections and stops the plugin's servers.
func (s *Server) Stop() {
	s.Kubelet.Close()
	s.plugin.Stop()
}

// Serve starts the plugin's gRPC servers (draplugin.Plugin.Start, which reconciles first) on
// sockets under the node's directory (unless sc names RegistrarDir and PluginDir) with a fake
// API client holding the node and claims, and connects a Kubelet to them. Extra kubeletplugin
// options (GRPCVerbosity(-1) is the default) can be given in sc.Options.
func (n *Node) Serve(ctx context.Context, p *draplugin.Plugin, sc draplugin.StartConfig, claims ...*resourceapi.ResourceClaim) (*Server, error) {
	reg, data := cmp.Or(sc.RegistrarDir, filepath.Join(n.Dir, "r")), cmp.Or(sc.PluginDir, filepath.Join(n.Dir, "d"))
	for _, d := range []string{reg, data} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: "node-uid"}}}
	for _, c := range claims {
		objs = append(objs, c)
	}
	client := NewAPIClient(n.apiDisabled, objs...)
	sc.KubeClient, sc.RegistrarDir, sc.PluginDir = client, reg, data
	sc.Options = append([]kubeletplugin.Option{kubeletplugin.GRPCVerbosity(-1)}, sc.Options...)
	rep, err := p.Start(ctx, sc)
	if err != nil {
		return nil, err
	}
	k, err := ConnectKubelet(ctx, kubelettest.RegistrationSocket(reg, p.DriverName()), p.DriverName())
	if err != nil {
		p.Stop()
		return nil, err
	}
	return &Server{Kubelet: k, Client: client, Report: rep, plugin: p}, nil
}
