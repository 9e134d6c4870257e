package cdi

import (
	"errors"
	"fmt"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	"tags.cncf.io/container-device-interface/specs-go"
)

// Validate checks a spec with the CDI library's own rules, the ones a container runtime applies
// when it loads the file: the version is known and high enough for the content
// (specs.ValidateVersion), vendor, class and device names are valid (pkg/parser), there is at
// least one device, no name repeats, every device has edits, and all edits are valid
// (cdi.ContainerEdits.Validate: env, device nodes, mounts, hooks).
func Validate(spec *specs.Spec) error {
	if spec == nil {
		return errors.New("nil spec")
	}
	if err := specs.ValidateVersion(spec); err != nil {
		return fmt.Errorf("cdiVersion %q: %w", spec.Version, err)
	}
	vendor, class := parser.ParseQualifier(spec.Kind)
	if vendor == "" {
		return fmt.Errorf("kind %q: must be <vendor>/<class>", spec.Kind)
	}
	if err := validateKind(vendor, class); err != nil {
		return fmt.Errorf("kind %q: %w", spec.Kind, err)
	}
	if err := (&cdiapi.ContainerEdits{ContainerEdits: &spec.ContainerEdits}).Validate(); err != nil {
		return fmt.Errorf("spec containerEdits: %w", err)
	}
	if len(spec.Devices) == 0 {
		return errors.New("no devices")
	}
	seen := make(map[string]bool, len(spec.Devices))
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return fmt.Errorf("device %q: %w", d.Name, err)
		}
		if seen[d.Name] {
			return fmt.Errorf("device %q: defined twice", d.Name)
		}
		seen[d.Name] = true
		e := &d.ContainerEdits
		if len(e.Env)+len(e.DeviceNodes)+len(e.Hooks)+len(e.Mounts)+len(e.AdditionalGIDs)+len(e.NetDevices) == 0 && e.IntelRdt == nil {
			return fmt.Errorf("device %q: no container edits (the CDI library rejects an empty device)", d.Name)
		}
		if err := (&cdiapi.ContainerEdits{ContainerEdits: e}).Validate(); err != nil {
			return fmt.Errorf("device %q: %w", d.Name, err)
		}
	}
	return nil
}
