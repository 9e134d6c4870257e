package kubelettest

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Claim builds an unallocated claim in namespace "default" with one request named "device" for
// one device of class, narrowed by a CEL selector when selector is not empty. Its UID is
// derived from name (UID).
func Claim(name, class, selector string) *resourceapi.ResourceClaim {
	req := resourceapi.DeviceRequest{Name: "device", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	if selector != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: UID(name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}
}

// UID derives a valid, stable claim UID from a name.
func UID(name string) types.UID {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012x", h&0xffffffffffff))
}

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
