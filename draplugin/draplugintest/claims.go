package draplugintest

import (
	"context"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
)

// Claim builds an unallocated claim in namespace "default" with one request named "gpu" for
// one device of class, narrowed by a CEL selector when selector is not empty, with an opaque
// config (JSON, for the default driver) when config is not empty. Its UID is derived from name.
func Claim(name, class, selector, config string) *resourceapi.ResourceClaim {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	if selector != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: UID(name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}
	if config != "" {
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: gpudra.DefaultDriverName, Parameters: runtime.RawExtension{Raw: []byte(config)}}}}}
	}
	return c
}

// UID derives a valid, stable claim UID from a name.
func UID(name string) types.UID {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012x", h&0xffffffffffff))
}

// Allocate allocates the claim with the scheduler's allocator against the node's slices,
// remembering earlier allocations, and returns the allocated copy.
func (n *Node) Allocate(ctx context.Context, claim *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	return n.sim.Allocate(ctx, claim)
}

// Release gives an allocated claim's devices back to the node's allocator.
func (n *Node) Release(claim *resourceapi.ResourceClaim) { n.sim.Release(claim) }

// Prepare prepares one claim as the kubelet-plugin helper does and returns its result. p is any
// plugin the helper runs: a *draplugin.Plugin, an *exclusive.Plugin, a driver's own.
func Prepare(ctx context.Context, p kubeletplugin.DRAPlugin, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	res, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return nil, fmt.Errorf("PrepareResourceClaims: %w", err)
	}
	r, ok := res[claim.UID]
	if !ok {
		return nil, fmt.Errorf("PrepareResourceClaims returned no result for claim %s", claim.UID)
	}
	return r.Devices, r.Err
}

// Unprepare unprepares one claim as the kubelet-plugin helper does; p as for Prepare.
func Unprepare(ctx context.Context, p kubeletplugin.DRAPlugin, claim *resourceapi.ResourceClaim) error {
	res, err := p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{
		NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, UID: claim.UID}})
	if err != nil {
		return fmt.Errorf("UnprepareResourceClaims: %w", err)
	}
	return res[claim.UID]
}

// ErrCrash is the error a Crasher's hook stops an operation with.
var ErrCrash = fmt.Errorf("draplugintest: simulated crash")

// Crasher stops the operations of one claim at its n-th crash point, once armed. Its Hooks go
// into draplugin.Config.TestHooks. It records the crash points it saw.
type Crasher struct {
	uid types.UID
	n   int

	mu    sync.Mutex
	armed bool
	count int
	seen  []draplugin.CrashPoint
}

// CrashAt returns a Crasher for the n-th (1-based) crash point of claim uid; n < 1 never
// crashes (use it to record the points). It starts armed.
func CrashAt(uid types.UID, n int) *Crasher { return &Crasher{uid: uid, n: n, armed: true} }

// Arm starts (or, with false, stops) counting crash points.
func (c *Crasher) Arm(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = on
}

// Seen returns the crash points seen while armed.
func (c *Crasher) Seen() []draplugin.CrashPoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]draplugin.CrashPoint(nil), c.seen...)
}

// Reset forgets the crash points seen and restarts counting.
func (c *Crasher) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen, c.count = nil, 0
}

// Hooks returns the hooks to put into draplugin.Config.
func (c *Crasher) Hooks() draplugin.TestHooks {
	return draplugin.TestHooks{AfterStep: func(point draplugin.CrashPoint, uid types.UID) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if uid != c.uid || !c.armed {
			return nil
		}
		c.count++
		c.seen = append(c.seen, point)
		if c.count == c.n {
			return fmt.Errorf("%w after %s", ErrCrash, point)
		}
		return nil
	}}
}
