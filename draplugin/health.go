package draplugin

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

	"github.com/gpudra/gpudra/gpu"
)

// gpuHealth is why a GPU is unhealthy.
type gpuHealth struct {
	reason  string // taint value
	message string
	since   time.Time
}

// health tracks which GPUs are unhealthy, turns that into device taints and health reports,
// and watches NVML events. It knows devices only through the index it is attached to, and
// tells the plugin about changes through onChange.
type health struct {
	cfg     HealthConfig
	now     func() time.Time
	ignored map[uint64]bool
	// devices and onChange are set by attach.
	devices  *deviceIndex
	onChange func(ctx context.Context)

	mu        sync.Mutex
	unhealthy map[string]gpuHealth // by GPU UUID
	watchers  map[chan struct{}]struct{}
	cancel    context.CancelFunc
	done      chan struct{}
}

func newHealth(cfg HealthConfig, driverName string, now func() time.Time) *health {
	if cfg.IgnoredXIDs == nil {
		cfg.IgnoredXIDs = DefaultIgnoredXIDs()
	}
	if cfg.TaintKey == "" {
		cfg.TaintKey = driverName + "/unhealthy"
	}
	if cfg.ReportInterval <= 0 {
		cfg.ReportInterval = 10 * time.Second
	}
	if cfg.EventWait <= 0 {
		cfg.EventWait = time.Second
	}
	h := &health{cfg: cfg, now: now, ignored: map[uint64]bool{}, unhealthy: map[string]gpuHealth{}, watchers: map[chan struct{}]struct{}{}}
	for _, x := range cfg.IgnoredXIDs {
		h.ignored[x] = true
	}
	return h
}

// attach gives the health state the devices it reports on and what to call after a change.
func (h *health) attach(devices *deviceIndex, onChange func(ctx context.Context)) {
	h.devices, h.onChange = devices, onChange
}

// taints is the builder's WithDeviceTaints function: the devices of an unhealthy GPU get a
// NoSchedule taint.
func (h *health) taints(device string) []resourceapi.DeviceTaint {
	if h.devices == nil {
		return nil
	}
	u, ok := h.devices.gpuOf(device)
	if !ok {
		return nil
	}
	h.mu.Lock()
	st, bad := h.unhealthy[u]
	h.mu.Unlock()
	if !bad {
		return nil
	}
	t := metav1.NewTime(st.since.Truncate(time.Second))
	return []resourceapi.DeviceTaint{{Key: h.cfg.TaintKey, Value: st.reason, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &t}}
}

// count is the number of unhealthy GPUs.
func (h *health) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.unhealthy)
}

// set changes a GPU's health and, when it changed, wakes watchers and calls onChange.
func (h *health) set(ctx context.Context, gpuUUID string, bad *gpuHealth) {
	if !h.update(gpuUUID, bad) {
		return
	}
	logger := klog.FromContext(ctx)
	if bad != nil {
		logger.Info("GPU unhealthy, tainting its devices", "gpu", gpuUUID, "reason", bad.reason, "message", bad.message)
	} else {
		logger.Info("GPU healthy again, removing its taints", "gpu", gpuUUID)
	}
	h.onChange(ctx)
}

// update records a GPU's health and wakes watchers; it reports whether anything changed.
func (h *health) update(gpuUUID string, bad *gpuHealth) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, was := h.unhealthy[gpuUUID]
	switch {
	case bad == nil && !was:
		return false
	case bad == nil:
		delete(h.unhealthy, gpuUUID)
	case was && old.reason == bad.reason:
		return false
	default:
		h.unhealthy[gpuUUID] = *bad
	}
	for ch := range h.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return true
}

// onHealthChange republishes the slices with the new taints.
func (p *Plugin) onHealthChange(ctx context.Context) {
	if err := p.Publish(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Republishing ResourceSlices after a health change failed")
	}
}

// MarkUnhealthy taints every device of the physical GPU of device (a DRA device name or a GPU
// UUID) with reason as the taint value, for health sources other than NVML events.
func (p *Plugin) MarkUnhealthy(ctx context.Context, device, reason, message string) error {
	u, ok := p.devices.gpuOf(device)
	if !ok {
		return fmt.Errorf("unknown device %q: neither a published device nor a GPU UUID of node %s", device, p.nodeName)
	}
	p.health.set(ctx, u, &gpuHealth{reason: reason, message: message, since: p.now()})
	return nil
}

// MarkHealthy removes the health taints of the physical GPU of device (a DRA device name or a
// GPU UUID), for example after an operator reset it. Marking a healthy GPU is a no-op.
func (p *Plugin) MarkHealthy(ctx context.Context, device string) error {
	u, ok := p.devices.gpuOf(device)
	if !ok {
		return fmt.Errorf("unknown device %q: neither a published device nor a GPU UUID of node %s", device, p.nodeName)
	}
	p.health.set(ctx, u, nil)
	return nil
}

// Unhealthy returns the UUIDs of the GPUs marked unhealthy, with the reason of each.
func (p *Plugin) Unhealthy() map[string]string {
	h := p.health
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.unhealthy))
	for u, s := range h.unhealthy {
		out[u] = s.reason
	}
	return out
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
		case reports <- h.report(p.nodeName):
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

// report describes every published device.
func (h *health) report(pool string) kubeletplugin.DeviceHealthReport {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	rep := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(h.devices.names))}
	for _, name := range h.devices.names {
		d := kubeletplugin.DeviceHealth{PoolName: pool, DeviceName: name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: now, HealthCheckTimeout: 3 * h.cfg.ReportInterval}
		if u, ok := h.devices.gpuOf(name); ok {
			if st, bad := h.unhealthy[u]; bad {
				d.Health, d.Message = kubeletplugin.HealthStatusUnhealthy, st.reason+": "+st.message
			}
		}
		rep.Devices = append(rep.Devices, d)
	}
	return rep
}

// startMonitor watches NVML XID and GPU-lost events of the inventory's GPUs until ctx ends or
// stop.
func (h *health) startMonitor(ctx context.Context, lib nvml.Interface, inv *gpu.Inventory) {
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
		if err := h.monitor(ctx, lib, inv, ready); err != nil {
			logger.Error(err, "Health monitoring stopped")
		}
	}()
	<-ready
}

func (h *health) stop() {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel, h.done = nil, nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// watchedGPU is a GPU registered for events.
type watchedGPU struct {
	dev  nvml.Device
	uuid string
}

func (h *health) monitor(ctx context.Context, lib nvml.Interface, inv *gpu.Inventory, ready chan<- struct{}) error {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		close(ready)
		return fmt.Errorf("create NVML event set: %w", ret)
	}
	defer set.Free()
	gpus := register(ctx, lib, inv, set)
	close(ready)
	wait := uint32(h.cfg.EventWait / time.Millisecond)
	for ctx.Err() == nil {
		e, ret := set.Wait(wait)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
		case ret == nvml.ERROR_GPU_IS_LOST:
			h.gpuLost(ctx, gpus, e)
		case ret != nvml.SUCCESS:
			if ctx.Err() != nil {
				return nil
			}
			klog.FromContext(ctx).Error(ret, "Waiting for NVML events failed; retrying")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		default:
			h.event(ctx, gpus, e)
		}
	}
	return nil
}

// register asks for XID and double-bit ECC events of every GPU that supports them.
func register(ctx context.Context, lib nvml.Interface, inv *gpu.Inventory, set nvml.EventSet) []watchedGPU {
	logger := klog.FromContext(ctx)
	var gpus []watchedGPU
	for _, g := range inv.GPUs {
		dev, ret := lib.DeviceGetHandleByUUID(g.UUID)
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Cannot watch GPU health", "gpu", g.UUID)
			continue
		}
		gpus = append(gpus, watchedGPU{dev, g.UUID})
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
	return gpus
}

// gpuLost marks every GPU that no longer answers (or the event's GPU) as lost.
func (h *health) gpuLost(ctx context.Context, gpus []watchedGPU, e nvml.EventData) {
	lost := false
	for _, w := range gpus {
		if _, r := w.dev.GetUUID(); r == nvml.ERROR_GPU_IS_LOST || (e.Device != nil && w.dev == e.Device) {
			h.set(ctx, w.uuid, &gpuHealth{reason: "gpu-lost", message: "the GPU fell off the bus (NVML ERROR_GPU_IS_LOST)", since: h.now()})
			lost = true
		}
	}
	if !lost {
		klog.FromContext(ctx).Info("NVML reported a lost GPU but every GPU answers")
	}
}

// event handles one XID or ECC event.
func (h *health) event(ctx context.Context, gpus []watchedGPU, e nvml.EventData) {
	logger := klog.FromContext(ctx)
	u := ""
	for _, w := range gpus {
		if w.dev == e.Device {
			u = w.uuid
		}
	}
	if u == "" && e.Device != nil {
		if uu, r := e.Device.GetUUID(); r == nvml.SUCCESS {
			u = uu
		}
	}
	if _, ok := h.devices.gpus[u]; !ok {
		logger.Info("Event for an unknown GPU ignored", "eventType", e.EventType, "data", e.EventData)
		return
	}
	switch {
	case e.EventType&nvml.EventTypeXidCriticalError != 0:
		if h.ignored[e.EventData] {
			logger.V(2).Info("Ignoring benign XID", "gpu", u, "xid", e.EventData)
			return
		}
		h.set(ctx, u, &gpuHealth{reason: fmt.Sprintf("xid-%d", e.EventData), message: fmt.Sprintf("XID %d reported by the driver", e.EventData), since: h.now()})
	case e.EventType&nvml.EventTypeDoubleBitEccError != 0:
		h.set(ctx, u, &gpuHealth{reason: "ecc-dbe", message: "double-bit ECC error", since: h.now()})
	}
}
