package sharing

import (
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// ResolvedDevice is the effective configuration of one allocated device of a claim.
type ResolvedDevice struct {
	// Request is the allocation result's request name ("req" or "req/sub").
	Request string
	// Pool and DeviceName name the allocated device in its ResourceSlice.
	Pool, DeviceName string
	// Device is the device, as DeviceLookup found it.
	Device Device
	// Config is the winning config, defaulted and validated: a GpuConfig for a full GPU, a
	// MigDeviceConfig for a MIG device. Devices won by the same config entry share the pointer.
	Config v1beta1.Config
	// ConfigIndex is the index of the winning entry in status.allocation.devices.config, or
	// -1 when no entry applies and Config is the built-in default (exclusive).
	ConfigIndex int
	// AllocatedMemoryBytes is the result's consumed "memory" capacity, 0 when none.
	AllocatedMemoryBytes int64
	// ShareID is the result's share ID, "" unless the device may be allocated to several claims.
	ShareID string
	// AdminAccess is the result's admin access flag: such a device gets no sharing setup.
	AdminAccess bool
}

// Source describes where Config came from, for messages: `config[1] (GpuConfig from claim,
// requests [gpu])` or `default (no config for request "gpu")`.
func (c ResolvedDevice) Source(claim *resourceapi.ResourceClaim) string {
	if c.ConfigIndex < 0 {
		return fmt.Sprintf("default (no config for request %q)", c.Request)
	}
	cfg := claim.Status.Allocation.Devices.Config[c.ConfigIndex]
	return fmt.Sprintf("config[%d] (%s from %s, requests %s)", c.ConfigIndex,
		c.Config.GetObjectKind().GroupVersionKind().Kind, sourceName(cfg.Source), requestList(cfg.Requests))
}

func sourceName(s resourceapi.AllocationConfigSource) string {
	if s == resourceapi.AllocationConfigSourceClass {
		return "class"
	}
	return "claim"
}

func requestList(r []string) string {
	if len(r) == 0 {
		return "all"
	}
	return "[" + strings.Join(r, ", ") + "]"
}

// ClaimString names a claim in messages: "namespace/name (uid)".
func ClaimString(claim *resourceapi.ResourceClaim) string {
	if claim == nil {
		return "<nil claim>"
	}
	return fmt.Sprintf("%s/%s (%s)", claim.Namespace, claim.Name, claim.UID)
}

// matchesRequest says whether a config entry's request name applies to an allocation result's
// request: equal names, or the result is a subrequest ("req/sub") of the named request.
func matchesRequest(configRequest, resultRequest string) bool {
	return configRequest == resultRequest || strings.HasPrefix(resultRequest, configRequest+"/")
}

type decodedConfig struct {
	index  int
	source resourceapi.AllocationConfigSource
	reqs   []string
	cfg    v1beta1.Config
}

// Resolve returns the effective configuration of every device of the allocated claim that
// belongs to this driver, in allocation result order. Opaque configs of this driver are taken
// from status.allocation.devices.config, class configs before claim configs, and for each
// result the last entry that names its request (or one of its parent request, for a
// subrequest) wins; an entry without requests applies to every device whose type its kind
// fits. A winning entry whose kind does not fit the device is an error naming both.
func (m *Manager) Resolve(claim *resourceapi.ResourceClaim, lookup DeviceLookup) ([]ResolvedDevice, error) {
	if claim == nil || lookup == nil {
		return nil, errors.New("sharing: resolving configs needs a claim and a device lookup, got nil")
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", ClaimString(claim))
	}
	alloc := claim.Status.Allocation.Devices
	root := field.NewPath("status", "allocation", "devices", "config")
	var class, own []decodedConfig
	for i, c := range alloc.Config {
		if c.Opaque == nil || c.Opaque.Driver != m.driver {
			continue
		}
		cfg, err := m.decoder.DecodeRawAt(c.Opaque.Parameters, root.Index(i).Child("opaque", "parameters"))
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", ClaimString(claim), err)
		}
		d := decodedConfig{index: i, source: c.Source, reqs: c.Requests, cfg: cfg}
		switch c.Source {
		case resourceapi.AllocationConfigSourceClass:
			class = append(class, d)
		case resourceapi.AllocationConfigSourceClaim:
			own = append(own, d)
		default:
			return nil, fmt.Errorf("claim %s: %s: Unsupported value: %q: supported values: %q, %q", ClaimString(claim),
				root.Index(i).Child("source"), c.Source, resourceapi.AllocationConfigSourceClaim, resourceapi.AllocationConfigSourceClass)
		}
	}
	ordered := append(class, own...) // lowest precedence first

	var out []ResolvedDevice
	for _, r := range alloc.Results {
		if r.Driver != m.driver {
			continue
		}
		dev, ok := lookup(r.Pool, r.Device)
		if !ok {
			return nil, fmt.Errorf("claim %s: request %q: allocated device %s/%s is not on this node", ClaimString(claim), r.Request, r.Pool, r.Device)
		}
		dc := ResolvedDevice{Request: r.Request, Pool: r.Pool, DeviceName: r.Device, Device: dev, ConfigIndex: -1,
			AdminAccess: r.AdminAccess != nil && *r.AdminAccess}
		if r.ShareID != nil {
			dc.ShareID = string(*r.ShareID)
		}
		if q, ok := r.ConsumedCapacity["memory"]; ok {
			dc.AllocatedMemoryBytes = q.Value()
		}
		winner, err := winningConfig(ordered, r.Request, dev)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", ClaimString(claim), err)
		}
		if winner != nil {
			dc.Config, dc.ConfigIndex = winner.cfg, winner.index
		} else if dev.IsMIG {
			dc.Config = v1beta1.NewMigDeviceConfig()
		} else {
			dc.Config = v1beta1.NewGpuConfig()
		}
		out = append(out, dc)
	}
	return out, nil
}

func kindFits(cfg v1beta1.Config, dev Device) bool {
	switch cfg.(type) {
	case *v1beta1.MigDeviceConfig:
		return dev.IsMIG
	case *v1beta1.GpuConfig:
		return !dev.IsMIG
	}
	return false
}

func winningConfig(ordered []decodedConfig, request string, dev Device) (*decodedConfig, error) {
	for i := len(ordered) - 1; i >= 0; i-- {
		c := &ordered[i]
		if len(c.reqs) == 0 {
			if kindFits(c.cfg, dev) {
				return c, nil
			}
			continue
		}
		for _, req := range c.reqs {
			if !matchesRequest(req, request) {
				continue
			}
			if !kindFits(c.cfg, dev) {
				want := v1beta1.GpuConfigKind
				if dev.IsMIG {
					want = v1beta1.MigDeviceConfigKind
				}
				return nil, fmt.Errorf("status.allocation.devices.config[%d]: %s from %s for request %q does not fit device %s of request %q: it needs a %s",
					c.index, c.cfg.GetObjectKind().GroupVersionKind().Kind, sourceName(c.source), req, dev, request, want)
			}
			return c, nil
		}
	}
	return nil, nil
}
