package selectors

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	"github.com/gpudra/gpudra/selectors/internal/text"
	resourceapi "k8s.io/api/resource/v1"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/utils/ptr"
)

// Device is a device prepared for selector evaluation: its attributes and capacity are
// converted to CEL values once, so that evaluating many selectors against it costs only the
// evaluation. Build one with NewDevice or DevicesFromSlices; a Device is immutable and safe
// for concurrent use.
type Device struct {
	// Driver and Pool identify the device together with Device.Name.
	Driver, Pool string
	// Device is the device as published (not copied; do not modify it).
	Device *resourceapi.Device

	activation interpreter.Activation
	err        error // attribute values that cannot be converted, as the scheduler reports them
}

// Name is the device's name within its pool.
func (d *Device) Name() string { return d.Device.Name }

// ID is "driver/pool/name", the form the scheduler uses in messages.
func (d *Device) ID() string { return d.Driver + "/" + d.Pool + "/" + d.Device.Name }

// Attribute returns the value of a published attribute, looking up unqualified names in the
// driver's domain and qualified names in their domain, as CEL does.
func (d *Device) Attribute(name resourceapi.QualifiedName) (resourceapi.DeviceAttribute, bool) {
	domain, id := text.SplitQualified(string(name), d.Driver)
	for n, a := range d.Device.Attributes {
		if dd, ii := text.SplitQualified(string(n), d.Driver); dd == domain && ii == id {
			return a, true
		}
	}
	return resourceapi.DeviceAttribute{}, false
}

// NewDevice prepares a device of the given driver and pool for evaluation. It returns nil for
// a nil device.
func NewDevice(driver, pool string, device *resourceapi.Device) *Device {
	if device == nil {
		return nil
	}
	d := &Device{Driver: driver, Pool: pool, Device: device}
	attrs := map[string]map[string]any{}
	for name, a := range device.Attributes {
		v, err := attributeValue(a)
		if err != nil {
			d.err = fmt.Errorf("attribute %s: %w", name, err)
			break
		}
		domain, id := text.SplitQualified(string(name), driver)
		if attrs[domain] == nil {
			attrs[domain] = map[string]any{}
		}
		attrs[domain][id] = v
	}
	capacity := map[string]map[string]any{}
	for name, c := range device.Capacity {
		domain, id := text.SplitQualified(string(name), driver)
		if capacity[domain] == nil {
			capacity[domain] = map[string]any{}
		}
		q := c.Value
		capacity[domain][id] = apiservercel.Quantity{Quantity: &q}
	}
	dev := map[string]any{
		"driver":                   types.String(driver),
		"allowMultipleAllocations": types.Bool(ptr.Deref(device.AllowMultipleAllocations, false)),
		"attributes":               domainMap(attrs),
		"capacity":                 domainMap(capacity),
	}
	act, err := interpreter.NewActivation(map[string]any{"device": types.NewStringInterfaceMap(types.DefaultTypeAdapter, dev)})
	if err != nil && d.err == nil {
		d.err = err
	}
	d.activation = act
	return d
}

// DevicesFromSlices prepares every device of the slices, in slice and device order.
func DevicesFromSlices(slices []*resourceapi.ResourceSlice) []*Device {
	var out []*Device
	for _, s := range slices {
		if s == nil {
			continue
		}
		for i := range s.Spec.Devices {
			out = append(out, NewDevice(s.Spec.Driver, s.Spec.Pool.Name, &s.Spec.Devices[i]))
		}
	}
	return out
}

// Matches evaluates the selector against a device as the scheduler does: true, false, or the
// CEL runtime error (for example a missing attribute) that makes the scheduler give up on the
// claim for this node.
func (s *Selector) Matches(ctx context.Context, d *Device) (bool, error) {
	if s == nil || d == nil {
		return false, fmt.Errorf("selector or device is nil")
	}
	if d.err != nil {
		return false, d.err
	}
	var out ref.Val
	var err error
	if ctx.Done() == nil {
		// Nothing can interrupt the evaluation: skip the per-call cancellation watcher.
		out, _, err = s.program.Program.Eval(d.activation)
	} else {
		out, _, err = s.program.Program.ContextEval(ctx, d.activation)
	}
	if err != nil {
		if strings.Contains(err.Error(), "operation interrupted") && ctx.Err() != nil {
			return false, fmt.Errorf("%w: %w", err, context.Cause(ctx))
		}
		return false, err
	}
	native, err := out.ConvertToNative(reflect.TypeFor[bool]())
	if err != nil {
		return false, fmt.Errorf("CEL result of type %s could not be converted to bool: %w", out.Type().TypeName(), err)
	}
	b, ok := native.(bool)
	if !ok {
		return false, fmt.Errorf("CEL result is %T, not a bool", native)
	}
	return b, nil
}

// domainMap is device.attributes or device.capacity: a map from domain to a map from name to
// value in which an unknown domain is an empty map, as in the scheduler (so that
// device.attributes["other.domain"].x fails with "no such key: x", not with an unknown domain).
func domainMap(m map[string]map[string]any) traits.Mapper {
	outer := make(map[string]any, len(m))
	for domain, inner := range m {
		outer[domain] = types.NewStringInterfaceMap(types.DefaultTypeAdapter, inner)
	}
	return emptyDefaultMap{
		Mapper: types.NewStringInterfaceMap(types.DefaultTypeAdapter, outer),
		empty:  types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{}),
	}
}

type emptyDefaultMap struct {
	traits.Mapper
	empty ref.Val
}

// Find returns an empty map for keys that are not present.
func (m emptyDefaultMap) Find(key ref.Val) (ref.Val, bool) {
	if v, found := m.Mapper.Find(key); found {
		return v, true
	}
	return m.empty, true
}

// attributeValue is the CEL value of an attribute: the one value set, versions as semver.
func attributeValue(a resourceapi.DeviceAttribute) (any, error) {
	switch {
	case a.IntValues != nil:
		return a.IntValues, nil
	case a.BoolValues != nil:
		return a.BoolValues, nil
	case a.StringValues != nil:
		return a.StringValues, nil
	case a.VersionValues != nil:
		out := make([]apiservercel.Semver, len(a.VersionValues))
		for i, s := range a.VersionValues {
			v, err := semver.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("parse semantic version: %w", err)
			}
			out[i] = apiservercel.Semver{Version: v}
		}
		return out, nil
	case a.IntValue != nil:
		return types.Int(*a.IntValue), nil
	case a.BoolValue != nil:
		return types.Bool(*a.BoolValue), nil
	case a.StringValue != nil:
		return types.String(*a.StringValue), nil
	case a.VersionValue != nil:
		v, err := semver.Parse(*a.VersionValue)
		if err != nil {
			return nil, fmt.Errorf("parse semantic version: %w", err)
		}
		return apiservercel.Semver{Version: v}, nil
	}
	return nil, fmt.Errorf("unsupported attribute value")
}
