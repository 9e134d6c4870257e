package draplugintest

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
)

// Claim builds an unallocated claim in namespace "default" with one request named "gpu" for
// one device of class, narrowed by a CEL selector when selector is not empty, with an opaque
// config (JSON, for the default driver) when config is not empty. Its UID is derived from name
// (UID).
func Claim(name, class, selector, config string) *resourceapi.ResourceClaim {
	c := kubelettest.Claim(name, class, selector)
	c.Spec.Devices.Requests[0].Name = "gpu"
	if config != "" {
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: gpudra.DefaultDriverName, Parameters: runtime.RawExtension{Raw: []byte(config)}}}}}
	}
	return c
}

// UID derives a valid, stable claim UID from a name (kubelettest.UID).
func UID(name string) types.UID { return kubelettest.UID(name) }

// Allocate allocates the claim with the scheduler's allocator against the node's slices,
// remembering earlier allocations, and returns the allocated copy.
func (n *Node) Allocate(ctx context.Context, claim *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	return n.sim.Allocate(ctx, claim)
}

// Release gives an allocated claim's devices back to the node's allocator.
func (n *Node) Release(claim *resourceapi.ResourceClaim) { n.sim.Release(claim) }

// Prepare prepares one claim as the kubelet-plugin helper does and returns its result
// (kubelettest.Prepare). p is any plugin the helper runs: a *draplugin.Plugin, an
// *exclusive.Plugin, a driver's own.
func Prepare(ctx context.Context, p kubeletplugin.DRAPlugin, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	return kubelettest.Prepare(ctx, p, claim)
}

// Unprepare unprepares one claim as the kubelet-plugin helper does (kubelettest.Unprepare).
func Unprepare(ctx context.Context, p kubeletplugin.DRAPlugin, claim *resourceapi.ResourceClaim) error {
	return kubelettest.Unprepare(ctx, p, claim)
}

// ErrCrash, Crasher and CrashAt are package testhooks' (cgo-free, shared with the harness of
// package draplugin/exclusive), here so that a GPU driver's test needs one import.
// ErrCrash is the error a Crasher's hook stops an operation with (testhooks.ErrCrash).
var ErrCrash = testhooks.ErrCrash

// CrashAt returns a Crasher for the n-th (1-based) crash point of claim uid (testhooks.CrashAt).
func CrashAt(uid types.UID, n int) *Crasher { return testhooks.CrashAt(uid, n) }

// Crasher stops the operations of one claim at its n-th crash point (testhooks.Crasher).
type Crasher = testhooks.Crasher
