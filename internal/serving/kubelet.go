package serving

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpudra/gpudra/resourcepool"
)

// Endpoint is where and how a plugin's kubelet-plugin helper serves.
type Endpoint struct {
	// DriverName and NodeName name the driver and its node.
	DriverName, NodeName string
	// KubeClient talks to the API server.
	KubeClient kubernetes.Interface
	// RegistrarDir and PluginDir override the helper's registration and socket directories
	// when set.
	RegistrarDir, PluginDir string
	// RollingUpdatePodUID enables rolling updates when set.
	RollingUpdatePodUID types.UID
	// Options are applied after the others.
	Options []kubeletplugin.Option
}

// HelperOptions are the kubeletplugin.Start options of an endpoint. Serialize(false): the
// plugin locks per device itself (Locks), so claims on different devices are prepared in
// parallel.
func HelperOptions(e Endpoint) []kubeletplugin.Option {
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(e.DriverName),
		kubeletplugin.NodeName(e.NodeName),
		kubeletplugin.KubeClient(e.KubeClient),
		kubeletplugin.Serialize(false),
	}
	if e.RegistrarDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(e.RegistrarDir))
	}
	if e.PluginDir != "" {
		opts = append(opts, kubeletplugin.PluginDataDirectoryPath(e.PluginDir))
	}
	if e.RollingUpdatePodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(e.RollingUpdatePodUID))
	}
	return append(opts, e.Options...)
}

// DriverResources is a pool as the kubelet-plugin helper publishes it.
func DriverResources(pool *resourcepool.Pool) resourceslice.DriverResources {
	slices := make([]resourceslice.Slice, 0, len(pool.Slices))
	for _, s := range pool.Slices {
		slices = append(slices, resourceslice.Slice{Devices: s.Devices, SharedCounters: s.SharedCounters})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{pool.Name: {Slices: slices}}}
}

// Concurrently runs do for every item in its own goroutine and collects the results by key:
// kubelet's prepare and unprepare calls carry several claims, each with its own result.
func Concurrently[T any, R any](items []T, key func(T) types.UID, do func(T) R) map[types.UID]R {
	out := make(map[types.UID]R, len(items))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Go(func() {
			r := do(it)
			mu.Lock()
			out[key(it)] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// Publish hands the pool resources builds now to the kubelet-plugin helper, which brings the
// ResourceSlices in line (retrying API errors itself). A nil helper (not started) is a no-op.
func Publish(ctx context.Context, helper *kubeletplugin.Helper, resources func(context.Context) (*resourcepool.Pool, error)) error {
	if helper == nil {
		return nil
	}
	pool, err := resources(ctx)
	if err != nil {
		return fmt.Errorf("build ResourceSlices: %w", err)
	}
	if err := helper.PublishResources(ctx, DriverResources(pool)); err != nil {
		return fmt.Errorf("publish ResourceSlices: %w", err)
	}
	return nil
}

// unixSocketPathMax is the longest path a unix socket can be bound to or dialled at on Linux:
// sun_path holds 108 bytes, the terminating NUL included.
const unixSocketPathMax = 107

// CheckSocketPaths fails when a socket the kubelet-plugin helper would create for e cannot be
// bound: the registration socket in the registrar directory or the DRA socket in the plugin
// directory, with a path over 107 bytes. k8s.io/dynamic-resource-allocation v0.37 picks a
// rolling-update registration socket name whose path may be exactly 108 bytes, which neither
// the plugin can bind nor kubelet dial; the error says so and names the directory to shorten,
// before anything is created.
func CheckSocketPaths(e Endpoint) error {
	regDir := cmp.Or(e.RegistrarDir, kubeletplugin.KubeletRegistryDir)
	reg := e.DriverName + "-reg.sock"
	dra := "dra.sock"
	if e.RollingUpdatePodUID != "" {
		reg = kubeletplugin.RollingUpdateRegistrarSocketFile(regDir, e.DriverName, e.RollingUpdatePodUID)
		dra = "dra-" + string(e.RollingUpdatePodUID) + ".sock"
	}
	pluginDir := cmp.Or(e.PluginDir, path.Join(kubeletplugin.KubeletPluginsDir, e.DriverName))
	for _, s := range []struct{ what, dir, name string }{
		{"registration socket", regDir, reg}, {"DRA socket", pluginDir, dra},
	} {
		if p := path.Join(s.dir, s.name); len(p) > unixSocketPathMax {
			return fmt.Errorf("the %s %s is %d bytes long; a unix socket path holds at most %d: use a shorter directory than %s", s.what, p, len(p), unixSocketPathMax, s.dir)
		}
	}
	return nil
}
