package v1beta1

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	mib = int64(1) << 20
	// MaxPinnedDeviceMemoryLimit is the largest pinned device memory limit accepted (1Pi).
	MaxPinnedDeviceMemoryLimit = int64(1) << 50
	// MaxDeviceIndex is the largest device index accepted as a
	// defaultPerDevicePinnedMemoryLimit key.
	MaxDeviceIndex = 1023
)

var (
	// Immutable after package initialization; only used for matching.
	gpuUUIDPattern = regexp.MustCompile(`^(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	oldMIGPattern  = regexp.MustCompile(`^MIG-GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/[0-9]+/[0-9]+$`)
	indexPattern   = regexp.MustCompile(`^(0|[1-9][0-9]{0,3})$`)
)

// Supported values, sorted, as error messages list them.
var (
	gpuStrategies = []SharingStrategy{StrategyMPS, StrategyTimeSlicing}
	intervals     = []TimeSliceInterval{DefaultTimeSlice, LongTimeSlice, MediumTimeSlice, ShortTimeSlice}
)

// Validate implements Config.
func (c *GpuConfig) Validate() error { return c.ValidateAt(nil).ToAggregate() }

// Validate implements Config.
func (c *MigDeviceConfig) Validate() error { return c.ValidateAt(nil).ToAggregate() }

// ValidateAt implements Config.
func (c *GpuConfig) ValidateAt(root *field.Path) field.ErrorList {
	errs := validateTypeMeta(c.TypeMeta, GpuConfigKind, root)
	s := c.Sharing
	if s == nil {
		return errs
	}
	p := root.Child("sharing")
	switch s.Strategy {
	case StrategyTimeSlicing:
		if s.MpsConfig != nil {
			errs = append(errs, field.Forbidden(p.Child("mpsConfig"), "may only be set when strategy is MPS"))
		}
		errs = append(errs, s.TimeSlicingConfig.validate(p.Child("timeSlicingConfig"))...)
	case StrategyMPS:
		if s.TimeSlicingConfig != nil {
			errs = append(errs, field.Forbidden(p.Child("timeSlicingConfig"), "may only be set when strategy is TimeSlicing"))
		}
		errs = append(errs, s.MpsConfig.validate(p.Child("mpsConfig"))...)
	case "":
		errs = append(errs, field.Required(p.Child("strategy"), `supported values: "MPS", "TimeSlicing"`))
	default:
		errs = append(errs, field.NotSupported(p.Child("strategy"), string(s.Strategy), gpuStrategies))
	}
	return errs
}

// ValidateAt implements Config.
func (c *MigDeviceConfig) ValidateAt(root *field.Path) field.ErrorList {
	errs := validateTypeMeta(c.TypeMeta, MigDeviceConfigKind, root)
	s := c.Sharing
	if s == nil {
		return errs
	}
	p := root.Child("sharing")
	if s.TimeSlicingConfig != nil {
		errs = append(errs, field.Forbidden(p.Child("timeSlicingConfig"),
			"the time-slice interval is set per physical GPU and cannot be set for a MIG device (use a GpuConfig on a full GPU)"))
	}
	switch s.Strategy {
	case StrategyMPS:
		errs = append(errs, s.MpsConfig.validate(p.Child("mpsConfig"))...)
	case StrategyTimeSlicing:
		if s.MpsConfig != nil {
			errs = append(errs, field.Forbidden(p.Child("mpsConfig"), "may only be set when strategy is MPS"))
		}
	case "":
		errs = append(errs, field.Required(p.Child("strategy"), `supported values: "MPS", "TimeSlicing"`))
	default:
		errs = append(errs, field.NotSupported(p.Child("strategy"), string(s.Strategy), gpuStrategies))
	}
	return errs
}

func validateTypeMeta(tm metav1.TypeMeta, kind string, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	if tm.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(root.Child("apiVersion"), tm.APIVersion, []string{APIVersion}))
	}
	if tm.Kind != kind {
		errs = append(errs, field.NotSupported(root.Child("kind"), tm.Kind, []string{kind}))
	}
	return errs
}

func (t *TimeSlicingConfig) validate(p *field.Path) field.ErrorList {
	if t == nil {
		return nil
	}
	var errs field.ErrorList
	if t.TimeSlice != nil {
		errs = append(errs, field.Forbidden(p.Child("timeSlice"),
			"timeSlice is the old name of interval; set only interval"))
	}
	if t.Interval != nil && t.Interval.Int() < 0 {
		errs = append(errs, field.NotSupported(p.Child("interval"), string(*t.Interval), intervals))
	}
	return errs
}

func (m *MpsConfig) validate(p *field.Path) field.ErrorList {
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	if m.ActiveThreadPercentage != nil {
		errs = append(errs, field.Forbidden(p.Child("activeThreadPercentage"),
			"activeThreadPercentage is the old name of defaultActiveThreadPercentage; set only defaultActiveThreadPercentage"))
	}
	if m.PinnedDeviceMemoryLimit != nil {
		errs = append(errs, field.Forbidden(p.Child("pinnedDeviceMemoryLimit"),
			"pinnedDeviceMemoryLimit is the old name of defaultPinnedDeviceMemoryLimit; set only defaultPinnedDeviceMemoryLimit"))
	}
	if m.MaxConnections != nil {
		errs = append(errs, field.Forbidden(p.Child("maxConnections"),
			"not supported in "+APIVersion+": the MPS client limit is fixed by the GPU (48 clients, 16 before Volta); remove the field"))
	}
	if v := m.DefaultActiveThreadPercentage; v != nil && (*v < 1 || *v > 100) {
		errs = append(errs, field.Invalid(p.Child("defaultActiveThreadPercentage"), *v, "must be between 1 and 100"))
	}
	if q := m.DefaultPinnedDeviceMemoryLimit; q != nil {
		if _, err := LimitMiB(*q); err != nil {
			errs = append(errs, field.Invalid(p.Child("defaultPinnedDeviceMemoryLimit"), q.String(), err.Error()))
		}
	}
	keys := make([]string, 0, len(m.DefaultPerDevicePinnedMemoryLimit))
	for k := range m.DefaultPerDevicePinnedMemoryLimit {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pp := p.Child("defaultPerDevicePinnedMemoryLimit")
	for _, k := range keys {
		if _, _, err := ParseDeviceKey(k); err != nil {
			errs = append(errs, field.Invalid(pp, k, err.Error()))
			continue
		}
		q := m.DefaultPerDevicePinnedMemoryLimit[k]
		if _, err := LimitMiB(q); err != nil {
			errs = append(errs, field.Invalid(pp.Key(k), q.String(), err.Error()))
		}
	}
	return errs
}

// ParseDeviceKey parses a defaultPerDevicePinnedMemoryLimit key: a device UUID ("GPU-<uuid>",
// "MIG-<uuid>" or the old "MIG-GPU-<uuid>/<gi>/<ci>") or a decimal device index 0..1023.
// It returns the UUID, or the index with uuid "".
func ParseDeviceKey(key string) (uuid string, index int, err error) {
	switch {
	case gpuUUIDPattern.MatchString(key), oldMIGPattern.MatchString(key):
		return key, -1, nil
	case indexPattern.MatchString(key):
		i, _ := strconv.Atoi(key)
		if i > MaxDeviceIndex {
			break
		}
		return "", i, nil
	}
	return "", -1, fmt.Errorf("must be a device UUID (GPU-<uuid> or MIG-<uuid>) or a device index 0..%d", MaxDeviceIndex)
}

// LimitMiB converts a pinned memory limit to whole MiB (rounding down). Limits below 1Mi or
// above 1Pi are errors.
func LimitMiB(q resource.Quantity) (int64, error) {
	if q.Sign() <= 0 || q.Cmp(*resource.NewQuantity(mib, resource.BinarySI)) < 0 {
		return 0, fmt.Errorf("must be at least 1Mi")
	}
	if q.Cmp(*resource.NewQuantity(MaxPinnedDeviceMemoryLimit, resource.BinarySI)) > 0 {
		return 0, fmt.Errorf("must be at most 1Pi")
	}
	return q.Value() / mib, nil
}

// FormatLimit renders a limit in MiB the way MPS expects it ("16384M").
func FormatLimit(mebibytes int64) string { return strconv.FormatInt(mebibytes, 10) + "M" }
