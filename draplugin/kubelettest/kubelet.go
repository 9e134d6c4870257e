package kubelettest

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/draplugin/kubeletclient"
)

// RegistrationSocket is the path of the registration socket the kubelet-plugin helper serves
// for driverName in kubelet's plugin registration directory registrarDir, where kubelet finds
// it.
func RegistrationSocket(registrarDir, driverName string) string {
	return kubeletclient.RegistrationSocket(registrarDir, driverName)
}

// Kubelet talks to a DRA plugin's sockets as kubelet does (package draplugin/kubeletclient).
// Build one with ConnectKubelet (the harnesses' Serve methods do).
type Kubelet = kubeletclient.Kubelet

// ConnectKubelet registers a plugin as kubelet does: it calls GetInfo on the registration
// socket, checks that the plugin is a DRA plugin of driverName serving the v1 DRA service,
// confirms the registration and dials the endpoint the plugin named.
func ConnectKubelet(ctx context.Context, registrationSocket, driverName string) (*Kubelet, error) {
	return kubeletclient.Connect(ctx, registrationSocket, driverName)
}

// ClaimRefs turns claims into the references kubelet sends.
func ClaimRefs(claims ...*resourceapi.ResourceClaim) []*drapbv1.Claim {
	return kubeletclient.ClaimRefs(claims...)
}
