package draplugin

import (
	"context"
	"fmt"
	"slices"
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
	reason string // taint value
	// class is the reason's class for MetricHealthEvents: HealthReasonXID, HealthReasonECC,
	// HealthReasonGPULost or HealthReasonMarked.
	class   string
	message string
	since   time.Time
	// last is when the latest event of the same reason arrived.
	last time.Time
	// recovers is how the state ends by itself: recoverQuiet after RecoveryWindow without
	// events, recoverAnswers when the GPU answers NVML again, recoverNever (MarkUnhealthy).
	recovers recovery
}

// recovery is how an unhealthy state ends without MarkHealthy.
type recovery int

const (
	recoverNever recovery = iota
	recoverQuiet
	recoverAnswers
)

// health tracks which GPUs are unhealthy, turns that into device taints and health reports,
// and watches NVML events. It knows devices only through the index it is attached to, and
// tells the plugin about changes through onChange.
type health struct {
	cfg     HealthConfig
	now     func() time.Time
	ignored map[uint64]bool
	// devices, migDevices and onChange are set by attach.
	devices *deviceIndex
	// migDevices names the published MIG devices of a GPU with the given GPU instance id (and
	// compute instance id, unless it is noInstance).
	migDevices func(gpuUUID string, gi, ci uint32) []string
	onChange   func(ctx context.Context, change healthChange)

	mu sync.Mutex
	// unhealthy is keyed by GPU UUID (the whole GPU and its devices) or by the name of a MIG
	// device (that device only).
	unhealthy  map[string]gpuHealth
	monitoring bool // an NVML monitor runs
	// unwatched says, by GPU UUID, why the monitor gets no XID or ECC events of a GPU: its
	// devices are reported Unknown, not Healthy.
	unwatched map[string]string
	// passthrough are the GPUs (by UUID) bound, or being bound, to vfio-pci: the NVIDIA
	// driver lets go of them, and NVML reports them lost, which is not a fault.
	passthrough map[string]bool
	watchers    map[chan struct{}]struct{}
	cancel      context.CancelFunc
	done        chan struct{}
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
	if cfg.TaintEffect == "" {
		cfg.TaintEffect = resourceapi.DeviceTaintEffectNoSchedule
	}
	if cfg.RecoveryWindow == 0 {
		cfg.RecoveryWindow = DefaultRecoveryWindow
	}
	h := &health{cfg: cfg, now: now, ignored: map[uint64]bool{}, unhealthy: map[string]gpuHealth{}, watchers: map[chan struct{}]struct{}{}}
	for _, x := range cfg.IgnoredXIDs {
		h.ignored[x] = true
	}
	return h
}

// setPassthrough makes health ignore (on) trouble NVML reports for a GPU passed through to a
// virtual machine, or not (off).
func (h *health) setPassthrough(gpuUUID string, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.passthrough == nil {
		h.passthrough = map[string]bool{}
	}
	if on {
		h.passthrough[gpuUUID] = true
	} else {
		delete(h.passthrough, gpuUUID)
	}
}

// noInstance is NVML's GPU and compute instance id of an event that names no MIG device.
const noInstance = ^uint32(0)

// attach gives the health state the devices it reports on, how to find MIG devices by their
// instance ids, and what to call after a change.
func (h *health) attach(devices *deviceIndex, migDevices func(gpuUUID string, gi, ci uint32) []string, onChange func(ctx context.Context, change healthChange)) {
	h.devices, h.migDevices, h.onChange = devices, migDevices, onChange
}

// state returns why a device is unhealthy: its own state, else its GPU's.
func (h *health) state(device string) (gpuHealth, bool) {
	if st, bad := h.unhealthy[device]; bad {
		return st, true
	}
	u, ok := h.devices.gpuOf(device)
	if !ok {
		return gpuHealth{}, false
	}
	st, bad := h.unhealthy[u]
	return st, bad
}

// taints is the builder's WithDeviceTaints function: the devices of an unhealthy GPU get a
// taint with the configured effect.
func (h *health) taints(device string) []resourceapi.DeviceTaint {
	if h.devices == nil {
		return nil
	}
	h.mu.Lock()
	st, bad := h.state(device)
	h.mu.Unlock()
	if !bad {
		return nil
	}
	t := metav1.NewTime(st.since.Truncate(time.Second))
	return []resourceapi.DeviceTaint{{Key: h.cfg.TaintKey, Value: st.reason, Effect: h.cfg.TaintEffect, TimeAdded: &t}}
}

// count is the number of unhealthy GPUs.
func (h *health) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.unhealthy)
}

// healthChange is a health transition of a GPU or MIG device, as MetricHealthEvents counts it:
// the state entered ("unhealthy", "healthy") and the class of the taint set or removed.
type healthChange struct {
	state, class string
}

// set changes the health of a GPU (by UUID) or of one MIG device (by name) and, when it
// changed, wakes watchers and calls onChange.
func (h *health) set(ctx context.Context, target string, bad *gpuHealth) {
	old, changed := h.update(target, bad)
	if !changed {
		return
	}
	logger := klog.FromContext(ctx)
	change := healthChange{state: "unhealthy"}
	if bad != nil {
		change.class = bad.class
		logger.Info("Device unhealthy", "target", target, "reason", bad.reason, "message", bad.message)
	} else {
		change = healthChange{state: "healthy", class: old.class}
		logger.Info("Device healthy again", "target", target)
	}
	h.onChange(ctx, change)
}

// update records the health of a target and wakes watchers; it reports whether anything
// changed, and the state it replaced.
func (h *health) update(target string, bad *gpuHealth) (gpuHealth, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, was := h.unhealthy[target]
	switch {
	case bad == nil && !was, bad != nil && h.passthrough[target]:
		return old, false
	case bad == nil:
		delete(h.unhealthy, target)
	case was && old.reason == bad.reason:
		// The same trouble again: it stays, and its quiet window starts over.
		old.last = bad.last
		h.unhealthy[target] = old
		return old, false
	default:
		h.unhealthy[target] = *bad
	}
	for ch := range h.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return old, true
}

// onHealthChange counts the transition and republishes the slices with the new taints.
func (p *Plugin) onHealthChange(_ context.Context, change healthChange) {
	p.metrics.healthEvent(change.state, change.class)
	p.republish()
}

// MarkUnhealthy taints every device of the physical GPU of device (a DRA device name or a GPU
// UUID) with reason as the taint value, for health sources other than NVML events.
func (p *Plugin) MarkUnhealthy(ctx context.Context, device, reason, message string) error {
	u, ok := p.devices.gpuOf(device)
	if !ok {
		return fmt.Errorf("unknown device %q: neither a published device nor a GPU UUID of node %s", device, p.nodeName)
	}
	now := p.now()
	p.health.set(ctx, u, &gpuHealth{reason: reason, class: HealthReasonMarked, message: message, since: now, last: now})
	return nil
}

// MarkHealthy removes the health taints of device (a DRA device name or a GPU UUID) and of its
// physical GPU, for example after an operator reset it. Marking a healthy device is a no-op.
func (p *Plugin) MarkHealthy(ctx context.Context, device string) error {
	u, ok := p.devices.gpuOf(device)
	if !ok {
		return fmt.Errorf("unknown device %q: neither a published device nor a GPU UUID of node %s", device, p.nodeName)
	}
	if device != u {
		p.health.set(ctx, device, nil)
	}
	p.health.set(ctx, u, nil)
	return nil
}

// Unhealthy returns the GPUs (by UUID) and MIG devices (by name) marked unhealthy, with the
// reason of each.
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
		if st, bad := h.state(name); bad {
			d.Health, d.Message = kubeletplugin.HealthStatusUnhealthy, st.reason+": "+st.message
		} else if !h.monitoring {
			d.Health, d.Message = kubeletplugin.HealthStatusUnknown, "no health monitoring runs for this device"
		} else if why, ok := h.unwatchedWhy(name); ok {
			d.Health, d.Message = kubeletplugin.HealthStatusUnknown, "the GPU's XID and ECC events are not watched: "+why
		}
		rep.Devices = append(rep.Devices, d)
	}
	return rep
}

// unwatchedWhy says why the events of the device's GPU are not watched, if they are not.
func (h *health) unwatchedWhy(device string) (string, bool) {
	u, ok := h.devices.gpuOf(device)
	if !ok {
		return "", false
	}
	why, unwatched := h.unwatched[u]
	return why, unwatched
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
	gpus, unwatched := register(ctx, lib, inv, set)
	h.setMonitoring(true, unwatched)
	defer h.setMonitoring(false, nil)
	close(ready)
	wait := uint32(h.cfg.EventWait / time.Millisecond)
	backoff := newBackoff(100*time.Millisecond, 30*time.Second)
	for ctx.Err() == nil {
		e, ret := set.Wait(wait)
		h.recover(ctx, gpus)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			backoff.reset()
		case ret == nvml.ERROR_GPU_IS_LOST:
			// NVML keeps answering GPU_IS_LOST while a GPU is off the bus: wait, do not spin.
			h.gpuLost(ctx, gpus, e)
			backoff.sleep(ctx)
		case ret != nvml.SUCCESS:
			if ctx.Err() != nil {
				return nil
			}
			klog.FromContext(ctx).Error(ret, "Waiting for NVML events failed; retrying")
			backoff.sleep(ctx)
		default:
			backoff.reset()
			h.event(ctx, gpus, e)
		}
	}
	return nil
}

// setMonitoring records whether a monitor runs (devices are Unknown without one) and which
// GPUs' events it does not get, and wakes watchers to report it.
func (h *health) setMonitoring(on bool, unwatched map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.monitoring, h.unwatched = on, unwatched
	for ch := range h.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// backoff waits longer each time it is asked to in a row, up to a maximum.
type backoff struct {
	first, max, next time.Duration
}

func newBackoff(first, maximum time.Duration) *backoff {
	return &backoff{first: first, max: maximum, next: first}
}

func (b *backoff) reset() { b.next = b.first }

func (b *backoff) sleep(ctx context.Context) {
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	b.next = min(2*b.next, b.max)
}

// register asks for XID and double-bit ECC events of every GPU that supports them. It returns
// the GPUs to check for loss, and why the events of the others are not watched, by UUID.
func register(ctx context.Context, lib nvml.Interface, inv *gpu.Inventory, set nvml.EventSet) ([]watchedGPU, map[string]string) {
	logger := klog.FromContext(ctx)
	var gpus []watchedGPU
	unwatched := map[string]string{}
	for _, g := range inv.GPUs {
		dev, ret := lib.DeviceGetHandleByUUID(g.UUID)
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Cannot watch GPU health", "gpu", g.UUID)
			unwatched[g.UUID] = "no NVML handle: " + ret.Error()
			continue
		}
		gpus = append(gpus, watchedGPU{dev, g.UUID})
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Cannot read supported events", "gpu", g.UUID)
			unwatched[g.UUID] = "reading its supported events failed: " + ret.Error()
			continue
		}
		types := supported & (nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
		if types == 0 {
			logger.Info("GPU reports no XID events; its health is not monitored", "gpu", g.UUID)
			unwatched[g.UUID] = "the GPU reports none"
			continue
		}
		if ret := dev.RegisterEvents(types, set); ret != nvml.SUCCESS {
			logger.Error(ret, "Cannot register for GPU events", "gpu", g.UUID)
			unwatched[g.UUID] = "registering for them failed: " + ret.Error()
		}
	}
	return gpus, unwatched
}

// gpuLost marks every GPU that no longer answers (or the event's GPU) as lost.
func (h *health) gpuLost(ctx context.Context, gpus []watchedGPU, e nvml.EventData) {
	lost := false
	for _, w := range gpus {
		if _, r := w.dev.GetUUID(); r == nvml.ERROR_GPU_IS_LOST || (e.Device != nil && w.dev == e.Device) {
			now := h.now()
			h.set(ctx, w.uuid, &gpuHealth{reason: "gpu-lost", class: HealthReasonGPULost, message: "the GPU fell off the bus (NVML ERROR_GPU_IS_LOST)", since: now, last: now, recovers: recoverAnswers})
			lost = true
		}
	}
	if !lost {
		klog.FromContext(ctx).Info("NVML reported a lost GPU but every GPU answers")
	}
}

// targets is what an event on GPU u makes unhealthy: the MIG device it names, when it names one
// that is published, else the whole GPU.
func (h *health) targets(u string, e nvml.EventData) []string {
	if e.GpuInstanceId == noInstance || h.migDevices == nil {
		return []string{u}
	}
	if devs := h.migDevices(u, e.GpuInstanceId, e.ComputeInstanceId); len(devs) > 0 {
		return devs
	}
	return []string{u}
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
	var bad gpuHealth
	switch {
	case e.EventType&nvml.EventTypeXidCriticalError != 0:
		if h.ignored[e.EventData] {
			logger.V(2).Info("Ignoring benign XID", "gpu", u, "xid", e.EventData)
			return
		}
		bad = gpuHealth{reason: fmt.Sprintf("xid-%d", e.EventData), class: HealthReasonXID, message: fmt.Sprintf("XID %d reported by the driver", e.EventData)}
	case e.EventType&nvml.EventTypeDoubleBitEccError != 0:
		bad = gpuHealth{reason: "ecc-dbe", class: HealthReasonECC, message: "double-bit ECC error"}
	default:
		return
	}
	now := h.now()
	bad.since, bad.last, bad.recovers = now, now, recoverQuiet
	for _, target := range h.targets(u, e) {
		h.set(ctx, target, &bad)
	}
}

// recover clears the states that ended by themselves: event taints quiet for the recovery
// window, lost GPUs that answer NVML again. The monitor calls it between event waits.
func (h *health) recover(ctx context.Context, gpus []watchedGPU) {
	for _, target := range h.recovered(gpus) {
		h.set(ctx, target, nil)
	}
}

// recovered lists the targets whose unhealthy state has ended.
func (h *health) recovered(gpus []watchedGPU) []string {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for target, st := range h.unhealthy {
		switch {
		case st.recovers == recoverQuiet && h.cfg.RecoveryWindow > 0 && now.Sub(st.last) >= h.cfg.RecoveryWindow:
			out = append(out, target)
		case st.recovers == recoverAnswers && answers(gpus, target):
			out = append(out, target)
		}
	}
	slices.Sort(out)
	return out
}

// answers reports whether the watched GPU with this UUID answers NVML.
func answers(gpus []watchedGPU, uuid string) bool {
	for _, w := range gpus {
		if w.uuid == uuid {
			_, ret := w.dev.GetUUID()
			return ret == nvml.SUCCESS
		}
	}
	return false
}

// migDevicesOf names the published MIG devices of a GPU with GPU instance gi (and compute
// instance ci unless it is noInstance): existing MIG devices and the instances the plugin
// created for claims.
func (p *Plugin) migDevicesOf(gpuUUID string, gi, ci uint32) []string {
	match := func(g, c int) bool { return uint32(g) == gi && (ci == noInstance || uint32(c) == ci) }
	var out []string
	for _, name := range p.devices.names {
		if d, _ := p.devices.lookup(name); d.MIG != nil && d.GPU.UUID == gpuUUID && match(d.MIG.GIID, d.MIG.CIID) {
			out = append(out, name)
		}
	}
	for _, c := range p.store.List() {
		for _, d := range c.Devices {
			if d.MIG != nil && d.MIG.Created && d.MIG.ParentUUID == gpuUUID && match(d.MIG.GIID, d.MIG.CIID) && !slices.Contains(out, d.Device) {
				out = append(out, d.Device)
			}
		}
	}
	return out
}
