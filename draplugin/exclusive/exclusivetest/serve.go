package exclusivetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
)

// GRPCVerbosity is the klog verbosity at which Serve's plugin logs its gRPC calls: high, to keep
// test output quiet (the kubelet-plugin helper logs at its verbosity, and a negative one is
// always on).
const GRPCVerbosity = 10

// Server is a plugin started by Node.Serve, and the fake kubelet and API server it talks to.
type Server struct {
	// Kubelet is registered with the plugin and connected to its DRA socket.
	*kubelettest.Kubelet
	// Client is the fake API client the plugin uses: it holds the Node object, the claims
	// prepared so far and the published ResourceSlices.
	Client *fake.Clientset
	// Report is what the start-up reconciliation did.
	Report *exclusive.ReconcileReport
	plugin *exclusive.Plugin
}

// Serve starts the plugin as a driver's serve does (exclusive.Plugin.Start: reconciliation,
// the kubelet plugin's gRPC servers and registration, the first ResourceSlices) on the node's
// PluginDir and RegistrarDir, with a fake API client holding the Node object, and registers a
// fake kubelet with it through its registration socket. sc.KubeClient, sc.PluginDir and
// sc.RegistrarDir are the node's; sc's other fields are kept. The helper logs gRPC calls at
// verbosity GRPCVerbosity (sc.Options may change it).
func (n *Node) Serve(ctx context.Context, p *exclusive.Plugin, sc exclusive.StartConfig) (*Server, error) {
	client := kubelettest.NewFakeClient(n.nodeObject())
	sc.KubeClient, sc.PluginDir, sc.RegistrarDir = client, n.PluginDir, n.RegistrarDir
	sc.Options = append([]kubeletplugin.Option{kubeletplugin.GRPCVerbosity(GRPCVerbosity)}, sc.Options...)
	rep, err := p.Start(ctx, sc)
	if err != nil {
		return nil, err
	}
	k, err := kubelettest.ConnectKubelet(ctx, kubelettest.RegistrationSocket(n.RegistrarDir, p.DriverName()), p.DriverName())
	if err != nil {
		p.Stop()
		return nil, err
	}
	return &Server{Kubelet: k, Client: client, Report: rep, plugin: p}, nil
}

// Stop closes the kubelet connections and stops the plugin's servers (exclusive.Plugin.Stop).
func (s *Server) Stop() {
	s.Kubelet.Close()
	s.plugin.Stop()
}

// Prepare stores the claims in the fake API server (the kubelet-plugin helper reads them from
// there) and calls NodePrepareResources for them through the DRA socket, as kubelet does.
func (s *Server) Prepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodePrepareResourcesResponse, error) {
	for _, c := range claims {
		if err := s.store(ctx, c); err != nil {
			return nil, err
		}
	}
	return s.Kubelet.Prepare(ctx, claims...)
}

func (s *Server) store(ctx context.Context, c *resourceapi.ResourceClaim) error {
	claims := s.Client.ResourceV1().ResourceClaims(c.Namespace)
	_, err := claims.Create(ctx, c, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = claims.Update(ctx, c, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("store claim %s/%s in the fake API server: %w", c.Namespace, c.Name, err)
	}
	return nil
}

// ResourceSlices waits up to a minute for the plugin's ResourceSlices to reach the fake API
// server and returns them.
func (s *Server) ResourceSlices(ctx context.Context) ([]*resourceapi.ResourceSlice, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		list, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		if len(list.Items) > 0 {
			out := make([]*resourceapi.ResourceSlice, 0, len(list.Items))
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(errors.New("no ResourceSlice was published"), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
