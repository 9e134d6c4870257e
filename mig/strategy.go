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
		if len(gpus) > 0 {
			r.Resources["nvidia.com/gpu"] = len(gpus)
		}
		return r, nil
	case StrategySingle, StrategyMixed:
	default:
		return r, fmt.Errorf("unknown MIG strategy %q (allowed: none, single, mixed)", s)
	}
	var migOn, migOff, empty []string
	var profiles []string
	devices := 0
	for _, g := range gpus {
		if !g.MigEnabled {
			migOff = append(migOff, fmt.Sprint(g.Index))
			continue
		}
		migOn = append(migOn, fmt.Sprint(g.Index))
		if len(g.MigDevices) == 0 {
			empty = append(empty, fmt.Sprint(g.Index))
		}
		for _, p := range g.MigDevices {
			devices++
			if !slices.Contains(profiles, p) {
				profiles = append(profiles, p)
			}
		}
	}
	slices.Sort(profiles)
	if s == StrategyMixed {
		if len(empty) > 0 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("MIG is enabled but no MIG devices are configured on GPU %s; ignored", strings.Join(empty, ", ")))
		}
		if len(migOff) > 0 {
			r.Resources["nvidia.com/gpu"] = len(migOff)
		}
		for _, g := range gpus {
			if g.MigEnabled {
				for _, p := range g.MigDevices {
					r.Resources["nvidia.com/mig-"+p]++
				}
			}
		}
		return r, nil
	}
	// single
	if len(migOn) == 0 {
		if len(gpus) > 0 {
			r.Resources["nvidia.com/gpu"] = len(gpus)
		}
		return r, nil
	}
	if len(empty) > 0 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("at least one MIG-enabled GPU has no MIG devices (GPU %s)", strings.Join(empty, ", ")))
	}
	if len(migOff) > 0 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("GPUs with MIG enabled (%s) and disabled (%s) on the same node", strings.Join(migOn, ", "), strings.Join(migOff, ", ")))
	}
	if len(profiles) > 1 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("more than one MIG device type on the node: %s", strings.Join(profiles, ", ")))
	}
	if len(r.Reasons) > 0 {
		r.Valid = false
		r.Resources = map[string]int{}
		return r, nil
	}
	r.Profile = profiles[0]
	r.Resources["nvidia.com/gpu"] = devices
	return r, nil
}
