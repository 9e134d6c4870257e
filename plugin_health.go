package gpudra

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// DefaultIgnoredXIDs are the XIDs that do not make a GPU unhealthy: they report application
// errors (13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
// 45 preemptive cleanup, 68 video processor exception) or a benign driver event (109 context
// switch timeout recovery), not a broken GPU. NVIDIA's device plugin and DRA driver skip the
// same list.
func DefaultIgnoredXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// HealthConfig configures health monitoring.
type HealthConfig struct {
	// Disabled turns monitoring off: no NVML events are watched and WatchHealthStatus returns
	// kubeletplugin.ErrHealthNotSupported.
	Disabled bool
	// IgnoredXIDs are XIDs that do not taint a GPU; nil means DefaultIgnoredXIDs. Use an empty,
	// non-nil slice to treat every XID as fatal.
	IgnoredXIDs []uint64
	// TaintKey is the key of the taint put on the devices of an unhealthy GPU
	// (default "<driver name>/unhealthy"); its value says why ("xid-79", "gpu-lost").
	TaintKey string
	// ReportInterval is how often WatchHealthStatus resends the full report even without a
	// change (default 10s); each report tells the kubelet to wait three intervals for the next.
	ReportInterval time.Duration
	// EventWait is how long one NVML event wait blocks (default 1s); it bounds how long
	// stopping the monitor takes.
	EventWait time.Duration
}

// gpuHealth is why a GPU is unhealthy.
type gpuHealth struct {
	reason  string // taint value
	message string
	since   time.Time
}

type healthState struct {
	cfg     HealthConfig
	p       *Plugin
	ignored map[uint64]bool

	mu        sync.Mutex
	unhealthy map[string]gpuHealth // by GPU UUID
	watchers  map[chan struct{}]struct{}
	cancel    context.CancelFunc
	done      chan struct{}
}

func newHealthState(cfg HealthConfig, p *Plugin) *healthState {
	if cfg.IgnoredXIDs == nil {
		cfg.IgnoredXIDs = DefaultIgnoredXIDs()
	}
	if cfg.TaintKey == "" {
		cfg.TaintKey = p.driverName + "/unhealthy"
	}
	if cfg.ReportInterval <= 0 {
		cfg.ReportInterval = 10 * time.Second
	}
	if cfg.EventWait <= 0 {
		cfg.EventWait = time.Second
	}
	h := &healthState{cfg: cfg, p: p, ignored: map[uint64]bool{}, unhealthy: map[string]gpuHealth{}, watchers: map[chan struct{}]struct{}{}}
	for _, x := range cfg.IgnoredXIDs {
		h.ignored[x] = true
	}
	return h
}

// taints is the builder's WithDeviceTaints function: the devices of an unhealthy GPU get a
// NoSchedule taint.
func (h *healthState) taints(device string) []resourceapi.DeviceTaint {
	g, err := h.p.gpuForDevice(device)
	if err != nil {
		return nil
	}
	h.mu.Lock()
	st, bad := h.unhealthy[g.UUID]
	h.mu.Unlock()
	if !bad {
		return nil
	}
	t := metav1.NewTime(st.since.Truncate(time.Second))
	return []resourceapi.DeviceTaint{{Key: h.cfg.TaintKey, Value: st.reason, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &t}}
}

// set changes a GPU's health and, when it changed, republishes the slices and wakes watchers.
func (h *healthState) set(ctx context.Context, gpuUUID string, bad *gpuHealth) {
	h.mu.Lock()
	old, was := h.unhealthy[gpuUUID]
	switch {
	case bad == nil && !was:
		h.mu.Unlock()
		return
	case bad == nil:
		delete(h.unhealthy, gpuUUID)
	case was && old.reason == bad.reason:
		h.mu.Unlock()
		return
	default:
		h.unhealthy[gpuUUID] = *bad
	}
	h.p.metrics.unhealthy.Set(float64(len(h.unhealthy)))
	for ch := range h.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
	logger := klog.FromContext(ctx)
	if bad != nil {
		logger.Info("GPU unhealthy, tainting its devices", "gpu", gpuUUID, "reason", bad.reason, "message", bad.message)
	} else {
		logger.Info("GPU healthy again, removing its taints", "gpu", gpuUUID)
	}
	if err := h.p.Publish(ctx); err != nil {
		logger.Error(err, "Republishing ResourceSlices after a health change failed")
	}
}

// MarkUnhealthy taints every device of the physical GPU of device (a DRA device name or a GPU
// UUID) with reason as the taint value, for health sources other than NVML events.
func (p *Plugin) MarkUnhealthy(ctx context.Context, device, reason, message string) error {
	g, err := p.gpuByNameOrUUID(device)
	if err != nil {
		return err
	}
	p.health.set(ctx, g, &gpuHealth{reason: reason, message: message, since: p.now()})
	return nil
}

// MarkHealthy removes the health taints of the physical GPU of device (a DRA device name or a
// GPU UUID), for example after an operator reset it. Marking a healthy GPU is a no-op.
func (p *Plugin) MarkHealthy(ctx context.Context, device string) error {
	g, err := p.gpuByNameOrUUID(device)
	if err != nil {
		return err
	}
	p.health.set(ctx, g, nil)
	return nil
}

// Unhealthy returns the UUIDs of the GPUs marked unhealthy, sorted, with the reason of each.
func (p *Plugin) Unhealthy() map[string]string {
	p.health.mu.Lock()
	defer p.health.mu.Unlock()
	out := make(map[string]string, len(p.health.unhealthy))
	for u, s := range p.health.unhealthy {
		out[u] = s.reason
	}
	return out
}

func (p *Plugin) gpuByNameOrUUID(device string) (string, error) {
	if _, ok := p.gpusByUUID[device]; ok {
		return device, nil
	}
	g, err := p.gpuForDevice(device)
	if err != nil {
		return "", err
	}
	return g.UUID, nil
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: it sends the health of every published
// device now, on every change, and every ReportInterval, until ctx ends.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	h := p.health
	if h.cfg.Disabled {
		return kubeletplugin.ErrHealthNotSupported
	}
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.watchers[ch] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.watchers, ch)
		h.mu.Unlock()
	}()
	ticker := time.NewTicker(h.cfg.ReportInterval)
	defer ticker.Stop()
	for {
		select {
		case reports <- p.healthReport():
		case <-ctx.Done():
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		case <-ticker.C:
		}
	}
}

// healthReport describes every published device.
func (p *Plugin) healthReport() kubeletplugin.DeviceHealthReport {
	h := p.health
	now := p.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	rep := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(p.published))}
	for _, name := range p.published {
		d := kubeletplugin.DeviceHealth{PoolName: p.nodeName, DeviceName: name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: now, HealthCheckTimeout: 3 * h.cfg.ReportInterval}
		if g, err := p.gpuForDevice(name); err == nil {
			if st, bad := h.unhealthy[g.UUID]; bad {
				d.Health, d.Message = kubeletplugin.HealthStatusUnhealthy, st.reason+": "+st.message
			}
		}
		rep.Devices = append(rep.Devices, d)
	}
	return rep
}

// startMonitor watches NVML XID and GPU-lost events until ctx ends or Stop.
func (h *healthState) startMonitor(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	h.mu.Lock()
	h.cancel, h.done = cancel, done
	h.mu.Unlock()
	ready := make(chan struct{})
	go func() {
		defer close(done)
		logger := klog.FromContext(ctx).WithName("health")
		ctx := klog.NewContext(ctx, logger)
		if err := h.monitor(ctx, ready); err != nil {
			logger.Error(err, "Health monitoring stopped")
		}
	}()
	<-ready
}

func (h *healthState) stop() {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel, h.done = nil, nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (h *healthState) monitor(ctx context.Context, ready chan<- struct{}) error {
	logger := klog.FromContext(ctx)
	lib := h.p.lib
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		close(ready)
		return fmt.Errorf("create NVML event set: %w", ret)
	}
	defer set.Free()
	type watched struct {
		dev  nvml.Device
		uuid string
	}
	var gpus []watched
	for _, g := range h.p.inv.GPUs {
		dev, ret := lib.DeviceGetHandleByUUID(g.UUID)
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Cannot watch GPU health", "gpu", g.UUID)
			continue
		}
		gpus = append(gpus, watched{dev, g.UUID})
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Cannot read supported events", "gpu", g.UUID)
			continue
		}
		types := supported & (nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
		if types == 0 {
			logger.Info("GPU reports no XID events; its health is not monitored", "gpu", g.UUID)
			continue
		}
		if ret := dev.RegisterEvents(types, set); ret != nvml.SUCCESS {
			logger.Error(ret, "Cannot register for GPU events", "gpu", g.UUID)
		}
	}
	close(ready)
	uuidOf := func(d nvml.Device) string {
		for _, w := range gpus {
			if w.dev == d {
				return w.uuid
			}
		}
		return ""
	}
	wait := uint32(h.cfg.EventWait / time.Millisecond)
	for ctx.Err() == nil {
		e, ret := set.Wait(wait)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			continue
		case ret == nvml.ERROR_GPU_IS_LOST:
			lost := false
			for _, w := range gpus {
				if _, r := w.dev.GetUUID(); r == nvml.ERROR_GPU_IS_LOST || (e.Device != nil && w.dev == e.Device) {
					h.set(ctx, w.uuid, &gpuHealth{reason: "gpu-lost", message: "the GPU fell off the bus (NVML ERROR_GPU_IS_LOST)", since: h.p.now()})
					lost = true
				}
			}
			if !lost {
				logger.Info("NVML reported a lost GPU but every GPU answers")
			}
			continue
		case ret != nvml.SUCCESS:
			if ctx.Err() != nil {
				return nil
			}
			logger.Error(ret, "Waiting for NVML events failed; retrying")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		u := uuidOf(e.Device)
		if u == "" {
			if e.Device != nil {
				if uu, r := e.Device.GetUUID(); r == nvml.SUCCESS {
					u = uu
				}
			}
			if _, ok := h.p.gpusByUUID[u]; !ok {
				logger.Info("Event for an unknown GPU ignored", "eventType", e.EventType, "data", e.EventData)
				continue
			}
		}
		switch {
		case e.EventType&nvml.EventTypeXidCriticalError != 0:
			if h.ignored[e.EventData] {
				logger.V(2).Info("Ignoring benign XID", "gpu", u, "xid", e.EventData)
				continue
			}
			h.set(ctx, u, &gpuHealth{reason: fmt.Sprintf("xid-%d", e.EventData), message: fmt.Sprintf("XID %d reported by the driver", e.EventData), since: h.p.now()})
		case e.EventType&nvml.EventTypeDoubleBitEccError != 0:
			h.set(ctx, u, &gpuHealth{reason: "ecc-dbe", message: "double-bit ECC error", since: h.p.now()})
		}
	}
	return nil
}
