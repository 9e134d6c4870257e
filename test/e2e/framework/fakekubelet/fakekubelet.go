package fakekubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Claim names a ResourceClaim as kubelet sends it: the plugin fetches the rest.
type Claim struct {
	Namespace, Name, UID string
}

// Plugin is a registered DRA plugin, connected to its DRA socket.
type Plugin struct {
	// RegistrationSocket is the socket the plugin registered with.
	RegistrationSocket string
	// Info is what GetInfo answered.
	Info *registerapi.PluginInfo

	reg, dra *grpc.ClientConn
	client   drapbv1.DRAPluginClient
}

// Sockets returns the unix sockets in a registration directory, sorted by name; kubelet's
// plugin watcher registers each of them.
func Sockets(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the registration directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

func dial(socket string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	return conn, nil
}

// Info calls GetInfo on a registration socket, as kubelet's plugin watcher does first.
func Info(ctx context.Context, socket string) (*registerapi.PluginInfo, error) {
	conn, err := dial(socket)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetInfo on %s: %w", socket, err)
	}
	return info, nil
}

// Register registers the plugin behind a registration socket as kubelet does: GetInfo, check
// the type and the v1 DRA service, NotifyRegistrationStatus, then connect to the DRA endpoint.
// A plugin that fails the checks is told so (PluginRegistered false) and an error returned.
func Register(ctx context.Context, socket string) (*Plugin, error) {
	reg, err := dial(socket)
	if err != nil {
		return nil, err
	}
	rc := registerapi.NewRegistrationClient(reg)
	info, err := rc.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		_ = reg.Close()
		return nil, fmt.Errorf("GetInfo on %s: %w", socket, err)
	}
	if err := validateInfo(info); err != nil {
		_, _ = rc.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: err.Error()})
		_ = reg.Close()
		return nil, fmt.Errorf("plugin on %s: %w", socket, err)
	}
	if _, err := rc.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		_ = reg.Close()
		return nil, fmt.Errorf("NotifyRegistrationStatus on %s: %w", socket, err)
	}
	dra, err := dial(info.Endpoint)
	if err != nil {
		_ = reg.Close()
		return nil, err
	}
	return &Plugin{RegistrationSocket: socket, Info: info, reg: reg, dra: dra, client: drapbv1.NewDRAPluginClient(dra)}, nil
}

func validateInfo(info *registerapi.PluginInfo) error {
	if info.Type != registerapi.DRAPlugin {
		return fmt.Errorf("type %q, want %q", info.Type, registerapi.DRAPlugin)
	}
	if info.Name == "" || info.Endpoint == "" {
		return fmt.Errorf("GetInfo answered no name or endpoint: %+v", info)
	}
	if !slices.Contains(info.SupportedVersions, drapbv1.DRAPluginService) {
		return fmt.Errorf("supported versions %v lack %s", info.SupportedVersions, drapbv1.DRAPluginService)
	}
	return nil
}

// Close closes both connections.
func (p *Plugin) Close() error {
	return errors.Join(p.dra.Close(), p.reg.Close())
}

func claims(cs []Claim) []*drapbv1.Claim {
	out := make([]*drapbv1.Claim, 0, len(cs))
	for _, c := range cs {
		out = append(out, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: c.UID})
	}
	return out
}

// Prepare calls NodePrepareResources for cs, as kubelet does before it starts a pod.
func (p *Plugin) Prepare(ctx context.Context, cs ...Claim) (*drapbv1.NodePrepareResourcesResponse, error) {
	return p.client.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: claims(cs)})
}

// Unprepare calls NodeUnprepareResources for cs, as kubelet does once no pod on the node uses
// them any more.
func (p *Plugin) Unprepare(ctx context.Context, cs ...Claim) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	return p.client.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: claims(cs)})
}

// WatchHealth opens the DRAResourceHealth v1 stream; each Recv is one health report.
func (p *Plugin) WatchHealth(ctx context.Context) (grpc.ServerStreamingClient[drahealthv1.NodeWatchResourcesResponse], error) {
	if !slices.Contains(p.Info.SupportedVersions, drahealthv1.DRAResourceHealthService) {
		return nil, fmt.Errorf("plugin %s does not offer %s (versions %v)", p.Info.Name, drahealthv1.DRAResourceHealthService, p.Info.SupportedVersions)
	}
	return drahealthv1.NewDRAResourceHealthClient(p.dra).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
}

// PrepareErrors returns the error of a prepare as kubelet would act on it: the gRPC error, a
// claim missing from the response (kubelet retries it), or the claims' own errors.
func PrepareErrors(resp *drapbv1.NodePrepareResourcesResponse, err error, cs ...Claim) error {
	if err != nil {
		return fmt.Errorf("NodePrepareResources: %w", err)
	}
	var errs []string
	for _, c := range cs {
		r, ok := resp.Claims[c.UID]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("claim %s/%s: missing from the response", c.Namespace, c.Name))
		case r.Error != "":
			errs = append(errs, fmt.Sprintf("claim %s/%s: %s", c.Namespace, c.Name, r.Error))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// UnprepareErrors is PrepareErrors for NodeUnprepareResources.
func UnprepareErrors(resp *drapbv1.NodeUnprepareResourcesResponse, err error, cs ...Claim) error {
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	var errs []string
	for _, c := range cs {
		r, ok := resp.Claims[c.UID]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("claim %s/%s: missing from the response", c.Namespace, c.Name))
		case r.Error != "":
			errs = append(errs, fmt.Sprintf("claim %s/%s: %s", c.Namespace, c.Name, r.Error))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
