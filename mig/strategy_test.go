package mig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func balancedGPU(i int) NodeGPU {
	return NodeGPU{Index: i, MigEnabled: true, MigDevices: []string{"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"}}
}

func uniformGPU(i int) NodeGPU {
	return NodeGPU{Index: i, MigEnabled: true, MigDevices: []string{"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"}}
}

// TestCheckStrategy follows GFD's rules (research §4) and seed 001: all-balanced under "single" is
// INVALID (several MIG device types), under "mixed" it advertises one resource per profile.
func TestCheckStrategy(t *testing.T) {
	var balanced8, uniform2 []NodeGPU
	for i := range 8 {
		balanced8 = append(balanced8, balancedGPU(i))
	}
	uniform2 = []NodeGPU{uniformGPU(0), uniformGPU(1)}
	tests := []struct {
		name string
		s    Strategy
		gpus []NodeGPU
		want StrategyReport
	}{
		{"single all-balanced", StrategySingle, balanced8, StrategyReport{Strategy: StrategySingle, Valid: false,
			Reasons: []string{"more than one MIG device type on the node: 1g.5gb, 2g.10gb, 3g.20gb"}}},
		{"mixed all-balanced", StrategyMixed, balanced8, StrategyReport{Strategy: StrategyMixed, Valid: true,
			Resources: map[string]int{"nvidia.com/mig-1g.5gb": 16, "nvidia.com/mig-2g.10gb": 8, "nvidia.com/mig-3g.20gb": 8}}},
		{"single uniform", StrategySingle, uniform2, StrategyReport{Strategy: StrategySingle, Valid: true, Profile: "1g.5gb",
			Resources: map[string]int{"nvidia.com/gpu": 14}}},
		{"single mixed MIG and non-MIG", StrategySingle, []NodeGPU{uniformGPU(0), {Index: 1}}, StrategyReport{Strategy: StrategySingle,
			Reasons: []string{"GPUs with MIG enabled (0) and disabled (1) on the same node"}}},
		{"single MIG without devices", StrategySingle, []NodeGPU{uniformGPU(0), {Index: 1, MigEnabled: true}}, StrategyReport{Strategy: StrategySingle,
			Reasons: []string{"at least one MIG-enabled GPU has no MIG devices (GPU 1)"}}},
		{"single no MIG behaves like none", StrategySingle, []NodeGPU{{Index: 0}, {Index: 1}}, StrategyReport{Strategy: StrategySingle, Valid: true,
			Resources: map[string]int{"nvidia.com/gpu": 2}}},
		{"mixed with empty MIG GPU and a full GPU", StrategyMixed, []NodeGPU{{Index: 0, MigEnabled: true}, {Index: 1}}, StrategyReport{Strategy: StrategyMixed, Valid: true,
			Warnings:  []string{"MIG is enabled but no MIG devices are configured on GPU 0; ignored"},
			Resources: map[string]int{"nvidia.com/gpu": 1}}},
		{"none", StrategyNone, balanced8, StrategyReport{Strategy: StrategyNone, Valid: true, Resources: map[string]int{"nvidia.com/gpu": 8}}},
	}
	for _, tt := range tests {
		got, err := CheckStrategy(tt.s, tt.gpus)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	if _, err := CheckStrategy("Mixed", nil); err == nil {
		t.Error("unknown strategy accepted")
	}
}
