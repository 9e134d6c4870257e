package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func copyQuantity(q *resource.Quantity) *resource.Quantity {
	if q == nil {
		return nil
	}
	c := q.DeepCopy()
	return &c
}

// DeepCopyInto copies c into out.
func (c *GpuConfig) DeepCopyInto(out *GpuConfig) {
	*out = *c
	out.TypeMeta = c.TypeMeta
	out.Sharing = c.Sharing.DeepCopy()
}

// DeepCopy returns a deep copy of c.
func (c *GpuConfig) DeepCopy() *GpuConfig {
	if c == nil {
		return nil
	}
	out := new(GpuConfig)
	c.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (c *GpuConfig) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	return c.DeepCopy()
}

// DeepCopyInto copies c into out.
func (c *MigDeviceConfig) DeepCopyInto(out *MigDeviceConfig) {
	*out = *c
	out.TypeMeta = c.TypeMeta
	out.Sharing = c.Sharing.DeepCopy()
}

// DeepCopy returns a deep copy of c.
func (c *MigDeviceConfig) DeepCopy() *MigDeviceConfig {
	if c == nil {
		return nil
	}
	out := new(MigDeviceConfig)
	c.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (c *MigDeviceConfig) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	return c.DeepCopy()
}

// DeepCopy returns a deep copy of s.
func (s *GpuSharing) DeepCopy() *GpuSharing {
	if s == nil {
		return nil
	}
	return &GpuSharing{
		Strategy:          s.Strategy,
		TimeSlicingConfig: s.TimeSlicingConfig.DeepCopy(),
		MpsConfig:         s.MpsConfig.DeepCopy(),
	}
}

// DeepCopy returns a deep copy of s.
func (s *MigDeviceSharing) DeepCopy() *MigDeviceSharing {
	if s == nil {
		return nil
	}
	return &MigDeviceSharing{Strategy: s.Strategy, TimeSlicingConfig: s.TimeSlicingConfig.DeepCopy(), MpsConfig: s.MpsConfig.DeepCopy()}
}

// DeepCopy returns a deep copy of t.
func (t *TimeSlicingConfig) DeepCopy() *TimeSlicingConfig {
	if t == nil {
		return nil
	}
	return &TimeSlicingConfig{Interval: copyPtr(t.Interval), TimeSlice: copyPtr(t.TimeSlice)}
}

// DeepCopy returns a deep copy of m.
func (m *MpsConfig) DeepCopy() *MpsConfig {
	if m == nil {
		return nil
	}
	out := &MpsConfig{
		DefaultActiveThreadPercentage:  copyPtr(m.DefaultActiveThreadPercentage),
		DefaultPinnedDeviceMemoryLimit: copyQuantity(m.DefaultPinnedDeviceMemoryLimit),
		ActiveThreadPercentage:         copyPtr(m.ActiveThreadPercentage),
		PinnedDeviceMemoryLimit:        copyQuantity(m.PinnedDeviceMemoryLimit),
		MaxConnections:                 copyPtr(m.MaxConnections),
	}
	if m.DefaultPerDevicePinnedMemoryLimit != nil {
		out.DefaultPerDevicePinnedMemoryLimit = make(map[string]resource.Quantity, len(m.DefaultPerDevicePinnedMemoryLimit))
		for k, v := range m.DefaultPerDevicePinnedMemoryLimit {
			out.DefaultPerDevicePinnedMemoryLimit[k] = v.DeepCopy()
		}
	}
	return out
}
