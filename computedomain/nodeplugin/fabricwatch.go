package nodeplugin

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// DefaultFabricPoll is how often WatchFabric reads the GPUs' fabric in the reference driver: a
// tray's fabric registration completes within minutes of boot, and a read costs a few NVML
// calls a GPU.
const DefaultFabricPoll = 30 * time.Second

// WatchFabric reads the node's NVLink clique every interval until ctx ends, and calls publish
// when it is not the clique Devices last answered for: a tray whose fabric registration
// completed after the plugin started (it published nothing), one that left its clique, or one
// moved to another. publish republishes the node's devices (exclusive.Plugin.Publish), which
// calls Devices again; when it fails, the next read tries again. A failed read is logged and
// retried at the next tick. Devices reads the fabric itself, so without WatchFabric the plugin
// publishes what it found at its start until the next republication.
func (d *Driver) WatchFabric(ctx context.Context, interval time.Duration, publish func(context.Context) error) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		clique, err := d.clique(ctx)
		if errors.Is(err, ErrNoClique) {
			clique, err = "", nil
		}
		if err != nil {
			logger.Error(err, "Cannot read the GPUs' NVLink fabric; trying again", "interval", interval)
			continue
		}
		listed, known := d.listed.get()
		if known && clique == listed {
			continue
		}
		logger.Info("The node's NVLink clique changed: republishing its IMEX devices", "from", listed, "to", clique)
		if err := publish(ctx); err != nil {
			logger.Error(err, "Cannot republish the IMEX devices; trying again", "interval", interval)
			d.listed.forget()
		}
	}
}

// listedClique is the clique Devices last answered for, safe for WatchFabric to read while a
// listing runs.
type listedClique struct {
	mu     sync.Mutex
	clique string
	known  bool
}

func (l *listedClique) set(clique string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clique, l.known = clique, true
}

func (l *listedClique) get() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clique, l.known
}

// forget makes the next comparison a change, so that a failed republication is tried again.
func (l *listedClique) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.known = false
}
