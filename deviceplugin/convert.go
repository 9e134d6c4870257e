package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// ExtendedClassInfix is the part of an extended-resource DeviceClass name between the resource
// and the driver's domain: nvidia.com/gpu is served by the class gpu.extended.nvidia.com.
const ExtendedClassInfix = ".extended."

// Option configures Convert.
type Option func(*converter)

// WithDriverName converts for another driver name (default gpudra.DefaultDriverName): its
// devices and attribute domain, and class names ending in the driver name.
func WithDriverName(name string) Option { return func(c *converter) { c.driver = name } }

// WithMIGProfiles names the MIG profiles that get a class of their own under migStrategy
// mixed. The default is every GPU-instance profile of the mig catalog, so that a class exists
// for whatever profile a node's GPUs are partitioned into.
func WithMIGProfiles(profiles ...string) Option {
	return func(c *converter) { c.profiles = slices.Clone(profiles) }
}

// Result is what a device plugin config becomes under DRA.
type Result struct {
	// Classes are the DeviceClasses to create, one per extended resource the device plugin
	// advertises under the config, each with spec.extendedResourceName set and, for a shared
	// resource, the sharing config (resource.nvidia.com/v1beta1) in spec.config.
	Classes []*resourceapi.DeviceClass
	// Differences says, one sentence each, what the classes do not reproduce.
	Differences []string
}

// resource is one extended resource the device plugin advertises and the devices serving it.
type resource struct {
	// name is the advertised name; base the name before renameByDefault.
	name, base string
	expr       string
	gpu, mig   bool
	configs    []v1beta1.Config
}

type converter struct {
	driver   string
	profiles []string
	b        selectors.Builder
	res      *Result
}

// Convert turns a device plugin config into DeviceClasses that serve the same extended
// resources through DRA (nvidia.com/gpu; nvidia.com/mig-<profile> with migStrategy mixed;
// <name>.shared with renameByDefault), and says what differs. Sharing maps to the class's
// opaque config: time-slicing to strategy TimeSlicing, MPS to strategy MPS with each client
// limited to 100/replicas percent of the multiprocessors, as the device plugin limits them.
//
// Replicas have no DRA equivalent: DRA allocates a device to one claim (a pod's extended
// resources become one claim), so replicas no longer let several pods share a GPU; Differences
// says so for each replicated resource.
func Convert(cfg *Config, opts ...Option) (*Result, error) {
	if cfg == nil {
		return nil, errors.New("convert: device plugin config is nil")
	}
	c := &converter{driver: gpudra.DefaultDriverName, res: &Result{}}
	for _, o := range opts {
		o(c)
	}
	c.b = selectors.For(c.driver)
	cfg, err := normalizedCopy(cfg)
	if err != nil {
		return nil, err
	}
	resources, err := c.base(cfg.Strategy())
	if err != nil {
		return nil, err
	}
	if err := c.share(cfg, resources); err != nil {
		return nil, err
	}
	for _, r := range resources {
		class, err := c.class(r)
		if err != nil {
			return nil, err
		}
		c.res.Classes = append(c.res.Classes, class)
	}
	return c.res, nil
}

// normalizedCopy checks a config built in code as Parse checks a file, without changing it.
func normalizedCopy(cfg *Config) (*Config, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	return Parse(data)
}

// base lists the resources the device plugin advertises under a MIG strategy, unshared.
func (c *converter) base(strategy MIGStrategy) ([]*resource, error) {
	gpu := &resource{name: GPUResource, base: GPUResource, expr: c.b.GPU(), gpu: true}
	switch strategy {
	case MigStrategySingle:
		gpu.expr, gpu.mig = selectors.Or(c.b.GPU(), c.b.MIG()), true
		return []*resource{gpu}, nil
	case MigStrategyMixed:
		out := []*resource{gpu}
		profiles := c.profiles
		if profiles == nil {
			profiles = catalogProfiles()
		}
		for _, p := range profiles {
			name, err := MIGResourceName(p)
			if err != nil {
				return nil, fmt.Errorf("convert: %w", err)
			}
			expr, err := c.b.Profiles(p)
			if err != nil {
				return nil, fmt.Errorf("convert: %w", err)
			}
			out = append(out, &resource{name: name, base: name, expr: selectors.And(c.b.MIG(), expr), mig: true})
		}
		return out, nil
	}
	return []*resource{gpu}, nil
}

// catalogProfiles is every GPU-instance profile of the mig catalog, sorted and without
// duplicates.
func catalogProfiles() []string {
	var out []string
	for _, m := range mig.Models() {
		out = append(out, m.ProfileNames()...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// MIGResourceName is the extended resource the device plugin's mixed strategy advertises a
// MIG profile as: nvidia.com/mig-<profile>, with "+" written as "." ("1g.10gb+me" is
// nvidia.com/mig-1g.10gb.me). Compute-instance profiles ("1c.3g.20gb") have none: the device
// plugin advertises only MIG devices whose compute instance spans the GPU instance.
func MIGResourceName(profile string) (string, error) {
	p, err := mig.ParseProfile(profile)
	if err != nil {
		return "", err
	}
	if p.IsComputeInstance() {
		return "", fmt.Errorf("MIG profile %s is a compute-instance profile: the device plugin advertises GPU-instance profiles only (e.g. %s)", profile, p.GPUInstance())
	}
	return QualifyResourceName("mig-" + strings.ReplaceAll(p.String(), "+", "."))
}

// ClassName is the name of the DeviceClass that serves an extended resource of the device
// plugin for a driver: nvidia.com/gpu is gpu.extended.nvidia.com for the default driver and
// gpu.extended.<driver> for another.
func ClassName(driver, resourceName string) string {
	domain := driver
	if driver == "" || driver == gpudra.DefaultDriverName {
		domain = strings.TrimSuffix(ResourcePrefix, "/")
	}
	return strings.TrimPrefix(resourceName, ResourcePrefix) + ExtendedClassInfix + domain
}

// class builds the DeviceClass of one resource.
func (c *converter) class(r *resource) (*resourceapi.DeviceClass, error) {
	dec := v1beta1.NewDecoder()
	var configs []resourceapi.DeviceClassConfiguration
	for _, cfg := range r.configs {
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("convert: %s: %w", r.name, err)
		}
		raw, err := dec.Encode(cfg)
		if err != nil {
			return nil, fmt.Errorf("convert: %s: %w", r.name, err)
		}
		configs = append(configs, resourceapi.DeviceClassConfiguration{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: c.driver, Parameters: runtime.RawExtension{Raw: raw}}}})
	}
	return selectors.ExtendedResourceClass(ClassName(c.driver, r.name), corev1.ResourceName(r.name), r.expr, configs...)
}
