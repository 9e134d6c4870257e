package gputest

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// supportedEvents are the event types every fake GPU supports.
const supportedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError |
	nvml.EventTypeDoubleBitEccError | nvml.EventTypePState | nvml.EventTypeClock

// noInstance is the GPU/compute instance id NVML reports in an event that is not about a MIG
// device.
const noInstance = 0xFFFFFFFF

// EventSet is a fake NVML event set. It implements nvml.EventSet on go-nvml's mock.EventSet.
// Events reach it through the Machine's Inject methods, for the GPUs and event types registered
// with RegisterEvents.
type EventSet struct {
	mock.EventSet

	m      *Machine
	queue  []queuedEvent
	wake   chan struct{}
	reg    map[*Device]uint64
	freed  bool
	closed chan struct{}
}

var _ nvml.EventSet = (*EventSet)(nil)

type queuedEvent struct {
	data nvml.EventData
	ret  nvml.Return
}

func newEventSet(m *Machine) *EventSet {
	s := &EventSet{m: m, wake: make(chan struct{}, 1), reg: map[*Device]uint64{}, closed: make(chan struct{})}
	s.WaitFunc = s.wait
	s.FreeFunc = guardRet(m.gate("EventSet"), "Free", s.free)
	return s
}

// free implements EventSet.Free behind the EventSet gate, with m.mu held.
func (s *EventSet) free() nvml.Return {
	if s.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s.freed = true
	close(s.closed)
	return nvml.SUCCESS
}

// wait implements EventSet.Wait: it returns the oldest pending event, or ERROR_TIMEOUT after
// timeout milliseconds. A lost GPU is reported as ERROR_GPU_IS_LOST, as nvmlEventSetWait does,
// on every wait until it recovers; the fake also fills EventData.Device so a test can tell which
// GPU it was.
func (s *EventSet) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	m := s.m
	m.mu.Lock()
	if ret := m.enter("EventSet", "Wait"); ret != nvml.SUCCESS {
		m.mu.Unlock()
		return nvml.EventData{}, ret
	}
	m.mu.Unlock()
	timer := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer timer.Stop()
	for {
		m.mu.Lock()
		if s.freed {
			m.mu.Unlock()
			return nvml.EventData{}, nvml.ERROR_INVALID_ARGUMENT
		}
		if len(s.queue) > 0 {
			e := s.queue[0]
			s.queue = s.queue[1:]
			m.mu.Unlock()
			return e.data, e.ret
		}
		// While a registered GPU is off the bus, NVML answers every wait with GPU_IS_LOST.
		if d := s.lostLocked(); d != nil {
			m.mu.Unlock()
			return nvml.EventData{Device: d}, nvml.ERROR_GPU_IS_LOST
		}
		m.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.closed:
		case <-timer.C:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
}

// lostLocked returns a lost GPU the set is registered for, nil when none is. The caller holds
// m.mu.
func (s *EventSet) lostLocked() *Device {
	for d := range s.reg {
		if d.lost {
			return d
		}
	}
	return nil
}

// push queues an event on the set if it registered for the GPU and type. The caller holds m.mu.
func (s *EventSet) push(d *Device, e queuedEvent) {
	if s.freed {
		return
	}
	types, ok := s.reg[d]
	if !ok || (e.ret == nvml.SUCCESS && types&e.data.EventType == 0) {
		return
	}
	s.queue = append(s.queue, e)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (d *Device) setEventFuncs() {
	g := d.gate()
	d.GetSupportedEventTypesFunc = get(g, "GetSupportedEventTypes", func() uint64 { return supportedEvents })
	d.RegisterEventsFunc = guardRet2(g, "RegisterEvents", d.registerEvents)
}

// registerEvents runs behind the device's gate, with m.mu held.
func (d *Device) registerEvents(types uint64, set nvml.EventSet) nvml.Return {
	s, ok := set.(*EventSet)
	if !ok || s.m != d.m || s.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if types&^uint64(supportedEvents) != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	s.reg[d] |= types
	return nvml.SUCCESS
}

// InjectXID delivers an XID critical-error event for GPU gpuIndex to every event set registered
// for it, as the driver does on an Xid. The event names no MIG device.
func (m *Machine) InjectXID(gpuIndex int, xid uint64) error {
	return m.InjectEvent(gpuIndex, nvml.EventData{
		EventType: nvml.EventTypeXidCriticalError, EventData: xid,
		GpuInstanceId: noInstance, ComputeInstanceId: noInstance,
	})
}

// InjectMIGXID delivers an XID event for one MIG device of GPU gpuIndex, named by its GPU and
// compute instance ids.
func (m *Machine) InjectMIGXID(gpuIndex int, giID, ciID uint32, xid uint64) error {
	return m.InjectEvent(gpuIndex, nvml.EventData{
		EventType: nvml.EventTypeXidCriticalError, EventData: xid,
		GpuInstanceId: giID, ComputeInstanceId: ciID,
	})
}

// InjectEvent delivers e for GPU gpuIndex to every event set registered for it and e.EventType.
// e.Device is set to the GPU's handle.
func (m *Machine) InjectEvent(gpuIndex int, e nvml.EventData) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.deviceLocked(gpuIndex)
	if err != nil {
		return err
	}
	e.Device = d
	for _, s := range m.eventSets {
		s.push(d, queuedEvent{data: e, ret: nvml.SUCCESS})
	}
	return nil
}

// InjectGPULost makes GPU gpuIndex fall off the bus: every later call on it, its GPU and compute
// instances and its MIG devices returns ERROR_GPU_IS_LOST, and every event set registered for it
// returns ERROR_GPU_IS_LOST from its next Wait.
func (m *Machine) InjectGPULost(gpuIndex int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.deviceLocked(gpuIndex)
	if err != nil {
		return err
	}
	d.lost = true
	for _, s := range m.eventSets {
		s.push(d, queuedEvent{data: nvml.EventData{Device: d}, ret: nvml.ERROR_GPU_IS_LOST})
	}
	return nil
}

// RecoverGPU undoes InjectGPULost, as a GPU reset would. MIG instances survive.
func (m *Machine) RecoverGPU(gpuIndex int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.deviceLocked(gpuIndex)
	if err != nil {
		return err
	}
	d.lost = false
	return nil
}

func (m *Machine) deviceLocked(i int) (*Device, error) {
	if i < 0 || i >= len(m.devices) {
		return nil, fmt.Errorf("gputest: machine %s has no GPU %d (valid: 0..%d)", m.spec.name, i, len(m.devices)-1)
	}
	return m.devices[i], nil
}
