package simulate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// ErrUnschedulable means the allocator found no devices for a claim on the node.
var ErrUnschedulable = errors.New("claim cannot be allocated on this node")

// DefaultFeatures are the allocator features a Kubernetes 1.37 scheduler enables by default
// (GA and beta-on gates): admin access, prioritized lists, partitionable devices, device taints,
// consumable capacity, binding conditions and device status.
func DefaultFeatures() structured.Features {
	return structured.Features{
		AdminAccess:            true,
		PrioritizedList:        true,
		PartitionableDevices:   true,
		DeviceTaints:           true,
		ConsumableCapacity:     true,
		DeviceBindingAndStatus: true,
	}
}

// Simulator allocates claims for one node and remembers what it allocated. It is safe for
// concurrent use; allocations are serialized as in the scheduler.
type Simulator struct {
	mu       sync.Mutex
	features structured.Features
	node     *corev1.Node
	classes  map[string]*resourceapi.DeviceClass
	slices   []*resourceapi.ResourceSlice
	cache    *cel.Cache
	state    structured.AllocatedState
}

// Option configures a Simulator.
type Option func(*Simulator)

// WithFeatures replaces DefaultFeatures.
func WithFeatures(f structured.Features) Option { return func(s *Simulator) { s.features = f } }

// New returns a simulator for the node with the given name.
func New(nodeName string, classes []*resourceapi.DeviceClass, slices []*resourceapi.ResourceSlice, opts ...Option) *Simulator {
	s := &Simulator{
		features: DefaultFeatures(),
		node:     &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}}},
		classes:  map[string]*resourceapi.DeviceClass{},
		slices:   slices,
		state: structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		},
	}
	for _, o := range opts {
		o(s)
	}
	s.cache = cel.NewCache(100, cel.Features{EnableConsumableCapacity: s.features.ConsumableCapacity, EnableListTypeAttributes: s.features.ListTypeAttributes})
	for _, c := range classes {
		s.classes[c.Name] = c
	}
	return s
}

// Publish replaces the node's ResourceSlices, as a driver republishing them does; what was
// allocated stays allocated.
func (s *Simulator) Publish(slices []*resourceapi.ResourceSlice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slices = slices
}

// List implements structured.DeviceClassLister.
func (s *Simulator) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(s.classes))
	for _, c := range s.classes {
		out = append(out, c)
	}
	return out, nil
}

// Get implements structured.DeviceClassLister.
func (s *Simulator) Get(name string) (*resourceapi.DeviceClass, error) {
	c, ok := s.classes[name]
	if !ok {
		return nil, fmt.Errorf("device class %q not found", name)
	}
	return c, nil
}

// claimError names the claim in an allocator error, unless the allocator already did (its CEL
// errors start with "claim <namespace>/<name>: ").
func claimError(claim *resourceapi.ResourceClaim, err error) error {
	prefix := "claim " + claim.Namespace + "/" + claim.Name + ": "
	if strings.HasPrefix(err.Error(), prefix) {
		return err
	}
	return fmt.Errorf("%s%w", prefix, err)
}

// Allocate allocates one claim, records the result, and returns the claim with
// status.allocation set (the input is not modified). It returns ErrUnschedulable when the
// claim does not fit, and other errors for invalid input (bad CEL, unknown class).
func (s *Simulator) Allocate(ctx context.Context, claim *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	if claim == nil {
		return nil, errors.New("simulate: Allocate: nil claim")
	}
	claim = claim.DeepCopy()
	Default(claim)
	if err := ValidateRequests(claim); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	alloc, err := structured.NewAllocator(ctx, s.features, s.state, s, s.slices, s.cache)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: create allocator: %w", claim.Namespace, claim.Name, err)
	}
	results, err := alloc.Allocate(ctx, s.node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return nil, claimError(claim, err)
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, ErrUnschedulable)
	}
	claim.Status.Allocation = &results[0]
	s.record(&results[0], true)
	return claim, nil
}

// Release forgets the allocation of a claim returned by Allocate.
func (s *Simulator) Release(claim *resourceapi.ResourceClaim) {
	if claim == nil || claim.Status.Allocation == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(claim.Status.Allocation, false)
}

func (s *Simulator) record(a *resourceapi.AllocationResult, add bool) {
	for _, r := range a.Devices.Results {
		if r.AdminAccess != nil && *r.AdminAccess {
			// As in the scheduler: an admin-access result does not hold the device, so neither
			// allocating nor releasing it changes what is in use.
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			if add {
				s.state.AllocatedDevices.Insert(id)
			} else {
				s.state.AllocatedDevices.Delete(id)
			}
			continue
		}
		shared := structured.MakeSharedDeviceID(id, r.ShareID)
		consumed := structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity)
		if add {
			s.state.AllocatedSharedDeviceIDs.Insert(shared)
			s.state.AggregatedCapacity.Insert(consumed)
		} else {
			s.state.AllocatedSharedDeviceIDs.Delete(shared)
			s.state.AggregatedCapacity.Remove(consumed)
		}
	}
}

// Default fills in what the API server defaults in a claim: exact-count requests of one device.
func Default(claim *resourceapi.ResourceClaim) {
	if claim == nil {
		return
	}
	for i := range claim.Spec.Devices.Requests {
		r := &claim.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			defaultExact(&r.Exactly.AllocationMode, &r.Exactly.Count)
		}
		for j := range r.FirstAvailable {
			defaultExact(&r.FirstAvailable[j].AllocationMode, &r.FirstAvailable[j].Count)
		}
	}
}

func defaultExact(mode *resourceapi.DeviceAllocationMode, count *int64) {
	if *mode == "" {
		*mode = resourceapi.DeviceAllocationModeExactCount
	}
	if *mode == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
		*count = 1
	}
}

// ValidateRequests checks what the allocator relies on in a defaulted claim's requests, as the
// API server's validation does: each request has exactly one of exactly and firstAvailable, a
// known allocation mode, and a count that is positive for ExactCount (at most
// AllocationResultsMaxSize, the most devices an allocation holds) and unset for All. Allocate
// calls it; a claim it refuses could never be stored, let alone allocated.
func ValidateRequests(claim *resourceapi.ResourceClaim) error {
	if claim == nil {
		return errors.New("simulate: nil claim")
	}
	var errs []error
	for i, r := range claim.Spec.Devices.Requests {
		p := fmt.Sprintf("spec.devices.requests[%d]", i)
		switch {
		case r.Exactly == nil && len(r.FirstAvailable) == 0:
			errs = append(errs, fmt.Errorf("%s (%q): Required value: exactly or firstAvailable", p, r.Name))
		case r.Exactly != nil && len(r.FirstAvailable) > 0:
			errs = append(errs, fmt.Errorf("%s (%q): Invalid value: exactly and firstAvailable are mutually exclusive", p, r.Name))
		case r.Exactly != nil:
			errs = append(errs, validateCount(p+".exactly", r.Exactly.AllocationMode, r.Exactly.Count))
		}
		for j, sub := range r.FirstAvailable {
			errs = append(errs, validateCount(fmt.Sprintf("%s.firstAvailable[%d]", p, j), sub.AllocationMode, sub.Count))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

func validateCount(path string, mode resourceapi.DeviceAllocationMode, count int64) error {
	switch mode {
	case resourceapi.DeviceAllocationModeAll:
		if count != 0 {
			return fmt.Errorf("%s.count: Invalid value: %d: must not be set when allocationMode is All", path, count)
		}
	case resourceapi.DeviceAllocationModeExactCount:
		if count <= 0 {
			return fmt.Errorf("%s.count: Invalid value: %d: must be greater than zero", path, count)
		}
		if count > resourceapi.AllocationResultsMaxSize {
			return fmt.Errorf("%s.count: Invalid value: %d: an allocation holds at most %d devices, so the request can never be allocated",
				path, count, resourceapi.AllocationResultsMaxSize)
		}
	default:
		return fmt.Errorf("%s.allocationMode: Unsupported value: %q: supported values: %q, %q", path, mode,
			resourceapi.DeviceAllocationModeAll, resourceapi.DeviceAllocationModeExactCount)
	}
	return nil
}
