package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// socketHealth answers /healthz for a liveness probe: healthy when the registration socket
// answers GetInfo and the DRA socket it names answers an empty NodePrepareResources, i.e. when
// kubelet can reach the plugin the way it does for a pod.
type socketHealth struct {
	regSocket string
	timeout   time.Duration
}

func newSocketHealth(registrarDir, driverName, podUID string) *socketHealth {
	name := driverName + "-reg.sock"
	if podUID != "" {
		name = kubeletplugin.RollingUpdateRegistrarSocketFile(registrarDir, driverName, types.UID(podUID))
	}
	return &socketHealth{regSocket: filepath.Join(registrarDir, name), timeout: 5 * time.Second}
}

func (h *socketHealth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	if err := h.check(ctx); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (h *socketHealth) check(ctx context.Context) error {
	reg, err := grpc.NewClient("unix://"+h.regSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("registration socket %s: %w", h.regSocket, err)
	}
	defer reg.Close()
	info, err := registerapi.NewRegistrationClient(reg).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("GetInfo on %s: %w", h.regSocket, err)
	}
	dra, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("DRA socket %s: %w", info.Endpoint, err)
	}
	defer dra.Close()
	if _, err := drapbv1.NewDRAPluginClient(dra).NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{}); err != nil {
		return fmt.Errorf("NodePrepareResources on %s: %w", info.Endpoint, err)
	}
	return nil
}
