package kubeletclient

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// RegistrationSocket is the path of the registration socket the kubelet-plugin helper serves
// for driverName in kubelet's plugin registration directory registrarDir, where kubelet finds
// it.
func RegistrationSocket(registrarDir, driverName string) string {
	return filepath.Join(registrarDir, driverName+"-reg.sock")
}

// Kubelet talks to a DRA plugin's sockets as kubelet does. Build one with Connect.
type Kubelet struct {
	// Info is what the registration socket answered.
	Info  *registerapi.PluginInfo
	dra   drapbv1.DRAPluginClient
	conns []*grpc.ClientConn
}

// Connect registers a plugin as kubelet does: it calls GetInfo on the registration
// socket, checks that the plugin is a DRA plugin of driverName serving the v1 DRA service,
// confirms the registration and dials the endpoint the plugin named.
func Connect(ctx context.Context, registrationSocket, driverName string) (*Kubelet, error) {
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
