package v1beta1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra/internal/input"
)

// LegacyGroupName is the API group of the classic-DRA parameter objects
// (GpuClaimParameters, MigDeviceClaimParameters) that preceded this API.
const LegacyGroupName = "gpu.resource.nvidia.com"

// Decoder decodes, defaults and validates opaque configuration. It is safe for concurrent
// use. Build one with NewDecoder.
//
// +k8s:deepcopy-gen=false
type Decoder struct {
	scheme *runtime.Scheme
	json   *kjson.Serializer
	yaml   *kjson.Serializer
	strict bool
}

type decoderOptions struct {
	strict bool
}

// DecoderOption configures NewDecoder.
type DecoderOption func(*decoderOptions)

// NonStrict makes the decoder ignore unknown and duplicate fields. Use it only for data this
// program wrote itself (a checkpoint written by a newer version); claims and classes must be
// decoded strictly.
func NonStrict() DecoderOption { return func(o *decoderOptions) { o.strict = false } }

// NewDecoder returns a strict decoder with its own scheme.
func NewDecoder(opts ...DecoderOption) *Decoder {
	o := decoderOptions{strict: true}
	for _, opt := range opts {
		opt(&o)
	}
	s := NewScheme()
	return &Decoder{
		scheme: s,
		strict: o.strict,
		json:   kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Strict: o.strict}),
		yaml:   kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: o.strict}),
	}
}

// Scheme returns the decoder's scheme (GpuConfig and MigDeviceConfig only). Callers must not
// add types to it.
func (d *Decoder) Scheme() *runtime.Scheme { return d.scheme }

// Decode decodes one GpuConfig or MigDeviceConfig from JSON or YAML, defaults it and
// validates it. Errors name the offending field and what is allowed.
func (d *Decoder) Decode(data []byte) (Config, error) {
	return d.decode(data, nil)
}

// DecodeAt is Decode with validation field paths rooted at root, for errors that point into
// the object that carries the configuration (e.g. spec.devices.config[0].opaque.parameters).
func (d *Decoder) DecodeAt(data []byte, root *field.Path) (Config, error) {
	return d.decode(data, root)
}

// DecodeRaw decodes the parameters of an opaque device configuration.
func (d *Decoder) DecodeRaw(raw runtime.RawExtension) (Config, error) {
	return d.DecodeRawAt(raw, nil)
}

// DecodeRawAt is DecodeRaw with validation field paths rooted at root.
func (d *Decoder) DecodeRawAt(raw runtime.RawExtension, root *field.Path) (Config, error) {
	if raw.Raw == nil && raw.Object != nil {
		cfg, ok := raw.Object.(Config)
		if !ok {
			return nil, fmt.Errorf("unsupported object %T: supported kinds: %s", raw.Object, supportedKinds)
		}
		cfg = cfg.DeepCopyObject().(Config)
		return cfg, d.finish(cfg, root)
	}
	return d.decode(raw.Raw, root)
}

const supportedKinds = `apiVersion "` + APIVersion + `" with kind "` + GpuConfigKind + `" or "` + MigDeviceConfigKind + `"`

func (d *Decoder) decode(data []byte, root *field.Path) (Config, error) {
	if int64(len(data)) > input.OpaqueLimit {
		// The API server stores no larger parameters; a larger input is not one it gave us.
		return nil, fmt.Errorf("configuration of %d bytes: over the %s limit of opaque parameters (resource.k8s.io/v1 OpaqueParametersMaxLength)",
			len(data), input.FormatSize(input.OpaqueLimit))
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("empty configuration: expected %s", supportedKinds)
	}
	s := d.yaml
	if trimmed[0] == '{' {
		s = d.json
	}
	obj, gvk, err := s.Decode(trimmed, nil, nil)
	if err != nil {
		return nil, d.decodeError(trimmed, err, gvk)
	}
	cfg, ok := obj.(Config)
	if !ok {
		// Unreachable: the scheme holds only Config kinds.
		return nil, fmt.Errorf("unsupported object %T: supported: %s", obj, supportedKinds)
	}
	return cfg, d.finish(cfg, root)
}

func (d *Decoder) finish(cfg Config, root *field.Path) error {
	cfg.Default()
	if errs := cfg.ValidateAt(root); len(errs) > 0 {
		return fmt.Errorf("invalid %s: %w", cfg.GetObjectKind().GroupVersionKind().Kind, errs.ToAggregate())
	}
	return nil
}

func (d *Decoder) decodeError(data []byte, err error, gvk *schema.GroupVersionKind) error {
	switch {
	case runtime.IsStrictDecodingError(err):
		return fmt.Errorf("%w: %s", err, allowedFields(gvk))
	case runtime.IsMissingKind(err):
		return fmt.Errorf("kind: Required value: expected %s", supportedKinds)
	case runtime.IsMissingVersion(err):
		return fmt.Errorf("apiVersion: Required value: expected %s", supportedKinds)
	case runtime.IsNotRegisteredError(err) && gvk != nil:
		if gvk.Group == LegacyGroupName {
			newKind := GpuConfigKind
			if gvk.Kind == "MigDeviceClaimParameters" {
				newKind = MigDeviceConfigKind
			}
			return fmt.Errorf("apiVersion: Unsupported value: %q: %s %q is the classic-DRA parameters API; write apiVersion %q with kind %q in the claim's opaque config (device counts and selection belong in the claim's requests)",
				gvk.GroupVersion().String(), gvk.Kind, gvk.GroupVersion().String(), APIVersion, newKind)
		}
		if gvk.GroupVersion().String() != APIVersion {
			return fmt.Errorf("apiVersion: Unsupported value: %q: supported values: %q", gvk.GroupVersion().String(), APIVersion)
		}
		return fmt.Errorf("kind: Unsupported value: %q: supported values: %q, %q", gvk.Kind, GpuConfigKind, MigDeviceConfigKind)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &field.Error{Type: field.ErrorTypeTypeInvalid, Field: te.Field, BadValue: field.OmitValueType{},
			Detail: "got a JSON " + te.Value + ", must be " + typeWord(te.Type)}
	}
	if errs := quantityErrors(data); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return fmt.Errorf("decoding %s: %w", supportedKinds, err)
}

func typeWord(t reflect.Type) string {
	if t == nil {
		return "of another type"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Bool:
		return "a boolean"
	}
	return "a " + t.String()
}

func allowedFields(gvk *schema.GroupVersionKind) string {
	mps := "sharing.mpsConfig.defaultActiveThreadPercentage, sharing.mpsConfig.defaultPinnedDeviceMemoryLimit, sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit"
	if gvk != nil && gvk.Kind == MigDeviceConfigKind {
		return "allowed fields of " + MigDeviceConfigKind + ": apiVersion, kind, sharing.strategy, " + mps
	}
	return "allowed fields of " + GpuConfigKind + ": apiVersion, kind, sharing.strategy, sharing.timeSlicingConfig.interval, " + mps
}

// quantityErrors finds quantity fields that do not parse, so that the error names the field
// (the JSON decoder reports only the quantity syntax).
func quantityErrors(data []byte) field.ErrorList {
	var doc map[string]any
	if yaml.Unmarshal(data, &doc) != nil {
		return nil
	}
	sharing, _ := doc["sharing"].(map[string]any)
	mps, _ := sharing["mpsConfig"].(map[string]any)
	p := field.NewPath("sharing", "mpsConfig")
	var errs field.ErrorList
	check := func(path *field.Path, v any) {
		switch v := v.(type) {
		case string:
			if _, err := resource.ParseQuantity(v); err == nil {
				return
			}
		case float64, int64, int:
			return
		}
		errs = append(errs, field.Invalid(path, v, "must be a quantity, such as 16Gi or 512Mi"))
	}
	for _, name := range []string{"defaultPinnedDeviceMemoryLimit", "pinnedDeviceMemoryLimit"} {
		if v, ok := mps[name]; ok && v != nil {
			check(p.Child(name), v)
		}
	}
	perDevice, _ := mps["defaultPerDevicePinnedMemoryLimit"].(map[string]any)
	keys := make([]string, 0, len(perDevice))
	for k := range perDevice {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		check(p.Child("defaultPerDevicePinnedMemoryLimit").Key(k), perDevice[k])
	}
	return errs
}

// Encode returns the JSON form of cfg, with apiVersion and kind.
func (d *Decoder) Encode(cfg Config) ([]byte, error) {
	var buf bytes.Buffer
	if err := d.json.Encode(cfg, &buf); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", cfg.GetObjectKind().GroupVersionKind().Kind, err)
	}
	return bytes.TrimSpace(buf.Bytes()), nil
}
