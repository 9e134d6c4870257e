package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// The device plugin's names and values this package reads (k8s-device-plugin api/config/v1).
const (
	// ConfigVersion is the only version of the device plugin's config file.
	ConfigVersion = "v1"
	// ResourcePrefix is the domain of every extended resource the device plugin advertises.
	ResourcePrefix = "nvidia.com/"
	// GPUResource is the device plugin's resource for full GPUs (and, with MigStrategySingle,
	// for MIG devices).
	GPUResource = ResourcePrefix + "gpu"
	// SharedSuffix is what renameByDefault appends to a shared resource's name.
	SharedSuffix = ".shared"
	// MaxResourceNameLength is the device plugin's limit for a full resource name.
	MaxResourceNameLength = 63
)

// MIGStrategy is the device plugin's flags.migStrategy: how it advertises MIG devices.
type MIGStrategy string

const (
	// MigStrategyNone advertises full GPUs only (the default).
	MigStrategyNone MIGStrategy = "none"
	// MigStrategySingle advertises every MIG device as nvidia.com/gpu; a node's MIG devices all
	// have one profile.
	MigStrategySingle MIGStrategy = "single"
	// MigStrategyMixed advertises each MIG profile as its own resource, nvidia.com/mig-<profile>.
	MigStrategyMixed MIGStrategy = "mixed"
)

// Config is the part of NVIDIA k8s-device-plugin's config file (version v1) that decides which
// extended resources a node advertises and how they are shared. The device plugin ignores
// fields it does not know, and so does Parse; the runtime flags (deviceListStrategy,
// nvidiaDriverRoot, gfd, ...) do not affect the conversion and are not kept.
type Config struct {
	// Version is "v1" (empty means v1).
	Version string `json:"version,omitempty"`
	// Flags are the plugin's flags.
	Flags Flags `json:"flags,omitzero"`
	// Sharing replicates resources for time-slicing or MPS.
	Sharing Sharing `json:"sharing,omitzero"`
}

// Flags are the device plugin flags the conversion reads.
type Flags struct {
	// MigStrategy is none (the default), single or mixed.
	MigStrategy *MIGStrategy `json:"migStrategy,omitempty"`
}

// Sharing is the device plugin's sharing section. When MPS is set, the device plugin shares
// with MPS only and ignores TimeSlicing.
type Sharing struct {
	// TimeSlicing replicates resources whose replicas take turns on the GPU.
	TimeSlicing *ReplicatedResources `json:"timeSlicing,omitempty"`
	// MPS replicates resources whose replicas run as clients of one MPS daemon.
	MPS *ReplicatedResources `json:"mps,omitempty"`
}

// ReplicatedResources lists the resources one sharing strategy replicates.
type ReplicatedResources struct {
	// RenameByDefault advertises each replicated resource as <name>.shared.
	RenameByDefault bool `json:"renameByDefault,omitempty"`
	// FailRequestsGreaterThanOne makes the device plugin refuse a request for more than one
	// replica.
	FailRequestsGreaterThanOne *bool `json:"failRequestsGreaterThanOne,omitempty"`
	// Resources are the replicated resources; at least one.
	Resources []ReplicatedResource `json:"resources"`
}

// ReplicatedResource is one replicated resource.
type ReplicatedResource struct {
	// Name is the resource, "nvidia.com/gpu" or "gpu" (the prefix is implied).
	Name string `json:"name"`
	// Rename is a custom name, which the device plugin ignores (it warns "not yet supported").
	Rename string `json:"rename,omitempty"`
	// Devices selects the devices to replicate: "all" (the default), a count or a list. The
	// device plugin ignores anything but "all" (it warns "not yet supported").
	Devices json.RawMessage `json:"devices,omitempty"`
	// Replicas is the number of replicas per device, at least 2.
	Replicas int `json:"replicas"`
}

// Parse reads a device plugin config file (YAML or JSON), checks it as the device plugin does
// at start, and returns it with resource names fully qualified ("gpu" becomes "nvidia.com/gpu").
func Parse(data []byte) (*Config, error) {
	var c Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	if err := c.normalize(); err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	return &c, nil
}

// Strategy is the config's MIG strategy, MigStrategyNone when unset.
func (c *Config) Strategy() MIGStrategy {
	if c.Flags.MigStrategy == nil || *c.Flags.MigStrategy == "" {
		return MigStrategyNone
	}
	return *c.Flags.MigStrategy
}

// normalize qualifies resource names and checks what the device plugin checks at start.
func (c *Config) normalize() error {
	var errs field.ErrorList
	if c.Version != "" && c.Version != ConfigVersion {
		errs = append(errs, field.NotSupported(field.NewPath("version"), c.Version, []string{ConfigVersion}))
	}
	switch s := c.Strategy(); s {
	case MigStrategyNone, MigStrategySingle, MigStrategyMixed:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("flags", "migStrategy"), s,
			[]MIGStrategy{MigStrategyNone, MigStrategySingle, MigStrategyMixed}))
	}
	p := field.NewPath("sharing")
	errs = append(errs, c.Sharing.TimeSlicing.normalize(p.Child("timeSlicing"))...)
	errs = append(errs, c.Sharing.MPS.normalize(p.Child("mps"))...)
	if c.Sharing.MPS != nil && c.Strategy() == MigStrategyMixed {
		errs = append(errs, field.Forbidden(p.Child("mps"), "the device plugin does not support MPS with migStrategy mixed"))
	}
	return errs.ToAggregate()
}

func (r *ReplicatedResources) normalize(p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	if len(r.Resources) == 0 {
		return field.ErrorList{field.Required(p.Child("resources"), "at least one resource to replicate")}
	}
	var errs field.ErrorList
	for i := range r.Resources {
		rr := &r.Resources[i]
		rp := p.Child("resources").Index(i)
		name, err := QualifyResourceName(rr.Name)
		if err != nil {
			errs = append(errs, field.Invalid(rp.Child("name"), rr.Name, err.Error()))
		}
		rr.Name = name
		if rr.Replicas < 2 {
			errs = append(errs, field.Invalid(rp.Child("replicas"), rr.Replicas, "must be at least 2"))
		}
	}
	return errs
}

// QualifyResourceName turns a device plugin resource name into its full form as the device
// plugin does: "gpu" is "nvidia.com/gpu"; the whole name has at most 63 characters and the part
// after the prefix is a DNS subdomain.
func QualifyResourceName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty resource name")
	}
	if !strings.HasPrefix(name, ResourcePrefix) {
		name = ResourcePrefix + name
	}
	if len(name) > MaxResourceNameLength {
		return name, fmt.Errorf("%s: a resource name has at most %d characters", name, MaxResourceNameLength)
	}
	if errs := validation.IsDNS1123Subdomain(strings.TrimPrefix(name, ResourcePrefix)); len(errs) > 0 {
		return name, fmt.Errorf("%s: %s", name, strings.Join(errs, "; "))
	}
	return name, nil
}

// effectiveName is the name a replicated resource is advertised under: the device plugin
// ignores rename and, with renameByDefault, appends ".shared".
func (r *ReplicatedResources) effectiveName(rr ReplicatedResource) string {
	if r.RenameByDefault {
		return rr.Name + SharedSuffix
	}
	return rr.Name
}

// devicesAll reports whether a devices field selects every device ("all" or absent).
func devicesAll(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null" || s == `"all"`
}
