package draplugintest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpudra/gpudra/draplugin"
)

// Kubelet talks to a DRA plugin's sockets as kubelet does. Build one with ConnectKubelet or
// Node.Serve.
type Kubelet struct {
	// Info is what the registration socket answered.
	Info  *registerapi.PluginInfo
	dra   drapbv1.DRAPluginClient
	conns []*grpc.ClientConn
}

// ConnectKubelet registers a plugin as kubelet does: it calls GetInfo on the registration
// socket, checks that the plugin is a DRA plugin of driverName serving the v1 DRA service,
// confirms the registration and dials the endpoint the plugin named.
func ConnectKubelet(ctx context.Context, registrationSocket, driverName string) (*Kubelet, error) {
	k := &Kubelet{}
	reg, err := k.dial(registrationSocket)
	if err != nil {
		return nil, err
	}
	rc := registerapi.NewRegistrationClient(reg)
	if k.Info, err = rc.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		k.Close()
		return nil, fmt.Errorf("registration GetInfo on %s: %w", registrationSocket, err)
	}
	if k.Info.Type != registerapi.DRAPlugin || k.Info.Name != driverName || !slices.Contains(k.Info.SupportedVersions, drapbv1.DRAPluginService) {
		k.Close()
		return nil, fmt.Errorf("registration socket %s: plugin %q of type %q with versions %v, want DRA plugin %q serving %s",
			registrationSocket, k.Info.Name, k.Info.Type, k.Info.SupportedVersions, driverName, drapbv1.DRAPluginService)
	}
	if _, err := rc.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		k.Close()
		return nil, fmt.Errorf("registration NotifyRegistrationStatus: %w", err)
	}
	conn, err := k.dial(k.Info.Endpoint)
	if err != nil {
		k.Close()
		return nil, err
	}
	k.dra = drapbv1.NewDRAPluginClient(conn)
	return k, nil
}

func (k *Kubelet) dial(socket string) (*grpc.ClientConn, error) {
	// A socket the plugin has just announced may not accept connections yet: retry quickly
	// rather than after gRPC's default first back-off of a second.
	fast := grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: 5 * time.Second}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(fast))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	k.conns = append(k.conns, conn)
	return conn, nil
}

// Close closes the connections.
func (k *Kubelet) Close() {
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

// ClaimRefs turns claims into the references kubelet sends.
func ClaimRefs(claims ...*resourceapi.ResourceClaim) []*drapbv1.Claim {
	out := make([]*drapbv1.Claim, 0, len(claims))
	for _, c := range claims {
		out = append(out, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	return out
}

// Prepare calls NodePrepareResources for the claims.
func (k *Kubelet) Prepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodePrepareResourcesResponse, error) {
	return k.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: ClaimRefs(claims...)})
}

// Unprepare calls NodeUnprepareResources for the claims.
func (k *Kubelet) Unprepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	return k.dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: ClaimRefs(claims...)})
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
	k, err := ConnectKubelet(ctx, filepath.Join(reg, p.DriverName()+"-reg.sock"), p.DriverName())
	if err != nil {
		p.Stop()
		return nil, err
	}
	return &Server{Kubelet: k, Client: client, Report: rep, plugin: p}, nil
}

// NewFakeClient is a fake API client holding objs that a kubelet plugin can publish
// ResourceSlices through, with every feature of the ResourceSlice API on (NewAPIClient with
// none disabled): it honours generateName, as the slice controller of the kubelet-plugin helper
// needs. A plugin's Start also needs the Node object among objs. It is for plugins of other
// kinds (package draplugin/exclusive); Node.Serve uses NewAPIClient.
func NewFakeClient(objs ...runtime.Object) *fake.Clientset { return NewAPIClient(nil, objs...) }
