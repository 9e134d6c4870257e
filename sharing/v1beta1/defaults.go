package v1beta1

// Default implements Config: TimeSlicing without an interval gets Default, MPS without
// mpsConfig gets an empty one, and deprecated v1alpha1 field names move to their current
// names when the current name is not set (when both are set, Validate reports it).
func (c *GpuConfig) Default() {
	if c.APIVersion == "" && c.Kind == "" {
		c.APIVersion, c.Kind = APIVersion, GpuConfigKind
	}
	s := c.Sharing
	if s == nil {
		return
	}
	switch s.Strategy {
	case StrategyTimeSlicing:
		if s.TimeSlicingConfig == nil {
			s.TimeSlicingConfig = &TimeSlicingConfig{}
		}
		t := s.TimeSlicingConfig
		if t.Interval == nil && t.TimeSlice != nil {
			t.Interval, t.TimeSlice = t.TimeSlice, nil
		}
		if t.Interval == nil {
			d := DefaultTimeSlice
			t.Interval = &d
		}
	case StrategyMPS:
		if s.MpsConfig == nil {
			s.MpsConfig = &MpsConfig{}
		}
		s.MpsConfig.Default()
	}
}

// Default implements Config; see GpuConfig.Default.
func (c *MigDeviceConfig) Default() {
	if c.APIVersion == "" && c.Kind == "" {
		c.APIVersion, c.Kind = APIVersion, MigDeviceConfigKind
	}
	s := c.Sharing
	if s == nil || s.Strategy != StrategyMPS {
		return
	}
	if s.MpsConfig == nil {
		s.MpsConfig = &MpsConfig{}
	}
	s.MpsConfig.Default()
}

// Default moves deprecated field names to their current names where those are unset.
func (m *MpsConfig) Default() {
	if m.DefaultActiveThreadPercentage == nil && m.ActiveThreadPercentage != nil {
		m.DefaultActiveThreadPercentage, m.ActiveThreadPercentage = m.ActiveThreadPercentage, nil
	}
	if m.DefaultPinnedDeviceMemoryLimit == nil && m.PinnedDeviceMemoryLimit != nil {
		m.DefaultPinnedDeviceMemoryLimit, m.PinnedDeviceMemoryLimit = m.PinnedDeviceMemoryLimit, nil
	}
}
