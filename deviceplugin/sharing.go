package deviceplugin

import (
	"fmt"

	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/sharing/v1beta1"
)

// share applies the config's sharing section to the resources: each replicated resource is
// advertised under its effective name with the sharing config of its strategy.
func (c *converter) share(cfg *Config, resources []*resource) error {
	rrs, strategy := cfg.Sharing.TimeSlicing, v1beta1.StrategyTimeSlicing
	if cfg.Sharing.MPS != nil {
		if rrs != nil {
			c.differ("sharing.timeSlicing is ignored: with sharing.mps set the device plugin shares with MPS only, and so do the classes")
		}
		rrs, strategy = cfg.Sharing.MPS, v1beta1.StrategyMPS
	}
	if rrs == nil {
		return nil
	}
	for i, rr := range rrs.Resources {
		where := fmt.Sprintf("sharing.%s.resources[%d] (%s)", strategyField(strategy), i, rr.Name)
		if rr.Rename != "" {
			c.differ("%s: rename %q is ignored, as the device plugin ignores it; the resource is %s", where, rr.Rename, rrs.effectiveName(rr))
		}
		if !devicesAll(rr.Devices) {
			c.differ("%s: devices %s is ignored, as the device plugin ignores it: every device is shared", where, string(rr.Devices))
		}
		r := findResource(resources, rr.Name)
		if r == nil {
			c.differ("%s: the device plugin advertises no such resource with migStrategy %s, so nothing is shared", where, cfg.Strategy())
			continue
		}
		if len(r.configs) > 0 {
			return fmt.Errorf("convert: %s: %s is replicated twice", where, rr.Name)
		}
		r.name = rrs.effectiveName(rr)
		c.differ("%s: replicas: %d let %d pods share each device; through DRA each pod's claim gets a device of its own, "+
			"shared (%s) by that pod's containers only, so a node serves %d times fewer such pods; "+
			"pods that must share one device need one ResourceClaim", where, rr.Replicas, rr.Replicas, strategy, rr.Replicas)
		r.configs = c.sharingConfigs(r, strategy, rr.Replicas, where)
		// The device plugin refuses requests for more than one MPS replica unless told otherwise.
		if !ptr.Deref(rrs.FailRequestsGreaterThanOne, strategy == v1beta1.StrategyMPS) {
			c.differ("%s: a request for several replicas could get replicas of one device; through DRA it gets as many devices", where)
		}
	}
	return nil
}

// sharingConfigs is the opaque config of a shared resource, per device type it covers.
func (c *converter) sharingConfigs(r *resource, strategy v1beta1.SharingStrategy, replicas int, where string) []v1beta1.Config {
	var out []v1beta1.Config
	if strategy == v1beta1.StrategyMPS {
		g := v1beta1.NewGpuConfig()
		g.Sharing = &v1beta1.GpuSharing{Strategy: v1beta1.StrategyMPS,
			MpsConfig: &v1beta1.MpsConfig{DefaultActiveThreadPercentage: ptr.To(100 / replicas)}}
		c.differ("%s: MPS clients get at most %d%% of the multiprocessors, as with the device plugin; its pinned memory limit "+
			"(device memory / %d per client) depends on each GPU and is not set: add mpsConfig.defaultPinnedDeviceMemoryLimit "+
			"to the class for a fleet of one GPU type", where, 100/replicas, replicas)
		if r.mig {
			c.differ("%s: MIG devices get no MPS, as the device plugin starts no MPS daemon for them", where)
		}
		return append(out, g)
	}
	if r.gpu {
		g := v1beta1.NewGpuConfig()
		g.Sharing = &v1beta1.GpuSharing{Strategy: v1beta1.StrategyTimeSlicing}
		out = append(out, g)
	}
	if r.mig {
		m := v1beta1.NewMigDeviceConfig()
		m.Sharing = &v1beta1.MigDeviceSharing{Strategy: v1beta1.StrategyTimeSlicing}
		out = append(out, m)
	}
	return out
}

func findResource(resources []*resource, name string) *resource {
	for _, r := range resources {
		if r.base == name {
			return r
		}
	}
	return nil
}

func strategyField(s v1beta1.SharingStrategy) string {
	if s == v1beta1.StrategyMPS {
		return "mps"
	}
	return "timeSlicing"
}

// differ records one difference between the device plugin and the classes.
func (c *converter) differ(format string, args ...any) {
	c.res.Differences = append(c.res.Differences, fmt.Sprintf(format, args...))
}
