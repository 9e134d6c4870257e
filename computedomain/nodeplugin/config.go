package nodeplugin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/internal/input"
)

// configAPIVersion is the apiVersion of the opaque configurations.
var configAPIVersion = v1beta1.GroupVersion().String()

// channelConfig decodes the ComputeDomainChannelConfig that applies to the claim's channel
// device, filling in the default allocation mode (Single).
func channelConfig(claim *resourceapi.ResourceClaim, node string) (*v1beta1.ComputeDomainChannelConfig, error) {
	var c v1beta1.ComputeDomainChannelConfig
	if err := claimConfig(claim, node, ChannelDevice, v1beta1.ChannelConfigKind, &c); err != nil {
		return nil, err
	}
	switch c.AllocationMode {
	case "":
		c.AllocationMode = v1beta1.AllocationModeSingle
	case v1beta1.AllocationModeSingle, v1beta1.AllocationModeAll:
	default:
		return nil, fmt.Errorf("%s: allocationMode %q: must be %s or %s", v1beta1.ChannelConfigKind, c.AllocationMode, v1beta1.AllocationModeSingle, v1beta1.AllocationModeAll)
	}
	if err := validateDomainID(c.DomainID); err != nil {
		return nil, fmt.Errorf("%s: %w", v1beta1.ChannelConfigKind, err)
	}
	return &c, nil
}

// daemonConfig decodes the ComputeDomainDaemonConfig that applies to the claim's daemon device.
func daemonConfig(claim *resourceapi.ResourceClaim, node string) (*v1beta1.ComputeDomainDaemonConfig, error) {
	var c v1beta1.ComputeDomainDaemonConfig
	if err := claimConfig(claim, node, DaemonDevice, v1beta1.DaemonConfigKind, &c); err != nil {
		return nil, err
	}
	if err := validateDomainID(c.DomainID); err != nil {
		return nil, fmt.Errorf("%s: %w", v1beta1.DaemonConfigKind, err)
	}
	return &c, nil
}

// validateDomainID checks a domainID: required, and a canonical UUID (a ComputeDomain's
// metadata.uid), since it names the daemon's directory and the node label's value.
func validateDomainID(id string) error {
	if id == "" {
		return fmt.Errorf("domainID: required (the UID of the ComputeDomain)")
	}
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return fmt.Errorf("domainID %q: must be the ComputeDomain's UID, a lower-case UUID like 123e4567-e89b-12d3-a456-426614174000", id)
	}
	return nil
}

// claimConfig decodes into out the opaque configuration of this driver that applies to the
// request that got device on node: of several, the last (the claim's own come after its
// classes', and win), after every one of them decoded cleanly. Configurations of other drivers
// are ignored.
func claimConfig(claim *resourceapi.ResourceClaim, node, device, kind string, out any) error {
	if claim.Status.Allocation == nil {
		return fmt.Errorf("claim is not allocated")
	}
	alloc := claim.Status.Allocation.Devices
	i := slices.IndexFunc(alloc.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == computedomain.DriverName && r.Pool == node && r.Device == device
	})
	if i < 0 {
		return fmt.Errorf("claim has no allocation result for device %s of pool %s", device, node)
	}
	request := alloc.Results[i].Request
	found := false
	for k, c := range alloc.Config {
		if c.Opaque == nil || c.Opaque.Driver != computedomain.DriverName || !appliesTo(c.Requests, request) {
			continue
		}
		if err := decodeStrict(c.Opaque.Parameters.Raw, kind, out); err != nil {
			return fmt.Errorf("request %s: config %d (from %s): %w", request, k, c.Source, err)
		}
		found = true
	}
	if !found {
		return fmt.Errorf("request %s: no opaque config of driver %s with a %s", request, computedomain.DriverName, kind)
	}
	return nil
}

// appliesTo says whether a config naming requests applies to request: it names none (every
// request), the request, or the request's parent ("req" for a subrequest "req/sub").
func appliesTo(requests []string, request string) bool {
	parent, _, _ := strings.Cut(request, "/")
	return len(requests) == 0 || slices.Contains(requests, request) || slices.Contains(requests, parent)
}

// decodeStrict decodes an opaque configuration of the given kind: apiVersion and kind must be
// this API's, and unknown or duplicate fields are errors.
func decodeStrict(raw []byte, kind string, out any) error {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if tm.APIVersion != configAPIVersion {
		return fmt.Errorf("apiVersion %q: must be %s", tm.APIVersion, configAPIVersion)
	}
	if tm.Kind != kind {
		return fmt.Errorf("kind %q: must be %s for this device", tm.Kind, kind)
	}
	if err := input.UnmarshalStrict(raw, out); err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	return nil
}
