package mig

import (
	"fmt"
	"slices"
	"strings"
)

// Strategy is a GPU Feature Discovery / device-plugin MIG strategy.
type Strategy string

// The MIG strategies of GFD and the NVIDIA device plugin.
const (
	// StrategyNone advertises whole GPUs only (nvidia.com/gpu), MIG or not.
	StrategyNone Strategy = "none"
	// StrategySingle advertises MIG devices as nvidia.com/gpu; every MIG device on the node must have
	// the same profile and every GPU must have MIG enabled (with devices) or none may.
	StrategySingle Strategy = "single"
	// StrategyMixed advertises one resource per profile (nvidia.com/mig-<profile>).
	StrategyMixed Strategy = "mixed"
)

// NodeGPU is one GPU of a node as a strategy check sees it.
type NodeGPU struct {
	// Index is the GPU index.
	Index int
	// MigEnabled is whether MIG mode is on.
	MigEnabled bool
	// MigDevices are the profile names of the GPU's MIG devices (e.g. "1g.5gb", "1c.3g.20gb").
	MigDevices []string
}

// StrategyReport is the outcome of a strategy check.
type StrategyReport struct {
	// Strategy is the strategy checked.
	Strategy Strategy
	// Valid is false when GFD would label the node "<model>-MIG-INVALID" (single strategy only).
	Valid bool
	// Reasons say why the node is invalid, one per violated rule.
	Reasons []string
	// Warnings are conditions GFD and the device plugin only log (mixed: MIG GPUs without devices).
	Warnings []string
	// Resources are the extended resources and counts the device plugin would advertise.
	Resources map[string]int
	// Profile is the single MIG profile of a valid single-strategy node with MIG ("" otherwise);
	// GFD sets nvidia.com/gpu.product to "<model>-MIG-<profile>".
	Profile string
}

// CheckStrategy evaluates a node's GPUs under a MIG strategy as GFD does. Under "single" the node
// is INVALID when a MIG-enabled GPU has no MIG devices, when MIG-enabled and MIG-disabled GPUs are
// mixed, or when more than one MIG profile is present; with no MIG-enabled GPU it behaves like
// "none". An unknown strategy is an error.
func CheckStrategy(s Strategy, gpus []NodeGPU) (StrategyReport, error) {
	r := StrategyReport{Strategy: s, Valid: true, Resources: map[string]int{}}
	switch s {
	case StrategyNone:
		r.wholeGPUs(gpus)
	case StrategySingle:
		r.single(gpus, countMIG(gpus))
	case StrategyMixed:
		r.mixed(gpus, countMIG(gpus))
	default:
		return r, fmt.Errorf("unknown MIG strategy %q (allowed: none, single, mixed)", s)
	}
	return r, nil
}

// migCensus is what a MIG strategy looks at on a node: the GPU indexes with MIG on, off, and on
// without MIG devices, the sorted distinct MIG profiles and the number of MIG devices.
type migCensus struct {
	on, off, empty []string
	profiles       []string
	devices        int
}

func countMIG(gpus []NodeGPU) migCensus {
	var c migCensus
	for _, g := range gpus {
		if !g.MigEnabled {
			c.off = append(c.off, fmt.Sprint(g.Index))
			continue
		}
		c.on = append(c.on, fmt.Sprint(g.Index))
		if len(g.MigDevices) == 0 {
			c.empty = append(c.empty, fmt.Sprint(g.Index))
		}
		for _, p := range g.MigDevices {
			c.devices++
			if !slices.Contains(c.profiles, p) {
				c.profiles = append(c.profiles, p)
			}
		}
	}
	slices.Sort(c.profiles)
	return c
}

// wholeGPUs advertises every GPU as nvidia.com/gpu, as the none strategy does.
func (r *StrategyReport) wholeGPUs(gpus []NodeGPU) {
	if len(gpus) > 0 {
		r.Resources["nvidia.com/gpu"] = len(gpus)
	}
}

// mixed advertises the MIG-disabled GPUs as nvidia.com/gpu and each MIG profile as its own
// resource; MIG-enabled GPUs without MIG devices are only a warning.
func (r *StrategyReport) mixed(gpus []NodeGPU, c migCensus) {
	if len(c.empty) > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("MIG is enabled but no MIG devices are configured on GPU %s; ignored", strings.Join(c.empty, ", ")))
	}
	if len(c.off) > 0 {
		r.Resources["nvidia.com/gpu"] = len(c.off)
	}
	for _, g := range gpus {
		if g.MigEnabled {
			for _, p := range g.MigDevices {
				r.Resources["nvidia.com/mig-"+p]++
			}
		}
	}
}

// single advertises the MIG devices of a node with one MIG profile as nvidia.com/gpu, whole
// GPUs when none has MIG enabled, and nothing on an INVALID node.
func (r *StrategyReport) single(gpus []NodeGPU, c migCensus) {
	if len(c.on) == 0 {
		r.wholeGPUs(gpus)
		return
	}
	if len(c.empty) > 0 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("at least one MIG-enabled GPU has no MIG devices (GPU %s)", strings.Join(c.empty, ", ")))
	}
	if len(c.off) > 0 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("GPUs with MIG enabled (%s) and disabled (%s) on the same node", strings.Join(c.on, ", "), strings.Join(c.off, ", ")))
	}
	if len(c.profiles) > 1 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("more than one MIG device type on the node: %s", strings.Join(c.profiles, ", ")))
	}
	if len(r.Reasons) > 0 {
		r.Valid = false
		r.Resources = map[string]int{}
		return
	}
	r.Profile = c.profiles[0]
	r.Resources["nvidia.com/gpu"] = c.devices
}
