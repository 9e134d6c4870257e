package sharing_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

func TestResolve(t *testing.T) {
	type got struct {
		Request, Device string
		Strategy        v1beta1.SharingStrategy
		Interval        v1beta1.TimeSliceInterval
		ConfigIndex     int
		Memory          int64
		ShareID         string
	}
	other := claimCfg(`{"anything": true}`, "gpu")
	other.Opaque.Driver = "other.example.com"
	otherResult := result("gpu", "nic-0")
	otherResult.Driver = "other.example.com"

	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		want    []got
		wantErr string
	}{
		{
			name:  "no config is exclusive",
			claim: newClaim("u", results(result("gpu", "gpu-0"), result("mig", "gpu-2-mig-1g5gb-0"))),
			want: []got{{Request: "gpu", Device: "gpu-0", Strategy: v1beta1.StrategyExclusive, ConfigIndex: -1},
				{Request: "mig", Device: "gpu-2-mig-1g5gb-0", Strategy: v1beta1.StrategyExclusive, ConfigIndex: -1}},
		},
		{
			name:  "claim config beats class config",
			claim: newClaim("u", results(result("gpu", "gpu-0")), claimCfg(tsShort, "gpu"), classCfg(tsLong)),
			want:  []got{{Request: "gpu", Device: "gpu-0", Strategy: v1beta1.StrategyTimeSlicing, Interval: "Short", ConfigIndex: 0}},
		},
		{
			name:  "later claim config wins",
			claim: newClaim("u", results(result("gpu", "gpu-0")), claimCfg(tsShort, "gpu"), claimCfg(mpsGPU, "gpu")),
			want:  []got{{Request: "gpu", Device: "gpu-0", Strategy: v1beta1.StrategyMPS, ConfigIndex: 1}},
		},
		{
			name:  "later class config wins among classes",
			claim: newClaim("u", results(result("gpu", "gpu-0")), classCfg(tsShort), classCfg(tsLong)),
			want:  []got{{Request: "gpu", Device: "gpu-0", Strategy: v1beta1.StrategyTimeSlicing, Interval: "Long", ConfigIndex: 1}},
		},
		{
			name:  "config for another request does not apply",
			claim: newClaim("u", results(result("gpu", "gpu-0"), result("other", "gpu-1")), claimCfg(tsShort, "gpu")),
			want: []got{{Request: "gpu", Device: "gpu-0", Strategy: v1beta1.StrategyTimeSlicing, Interval: "Short", ConfigIndex: 0},
				{Request: "other", Device: "gpu-1", Strategy: v1beta1.StrategyExclusive, ConfigIndex: -1}},
		},
		{
			name:  "config for a request applies to its subrequests",
			claim: newClaim("u", results(result("gpu/big", "gpu-0"), result("gpus/x", "gpu-1")), claimCfg(tsLong, "gpu")),
			want: []got{{Request: "gpu/big", Device: "gpu-0", Strategy: v1beta1.StrategyTimeSlicing, Interval: "Long", ConfigIndex: 0},
				{Request: "gpus/x", Device: "gpu-1", Strategy: v1beta1.StrategyExclusive, ConfigIndex: -1}},
		},
		{
			name:  "config for a subrequest",
			claim: newClaim("u", results(result("gpu/big", "gpu-0"), result("gpu/small", "gpu-1")), claimCfg(tsLong, "gpu/small")),
			want: []got{{Request: "gpu/big", Device: "gpu-0", Strategy: v1beta1.StrategyExclusive, ConfigIndex: -1},
				{Request: "gpu/small", Device: "gpu-1", Strategy: v1beta1.StrategyTimeSlicing, Interval: "Long", ConfigIndex: 0}},
		},
		{
			name: "config without requests applies by kind",
			claim: newClaim("u", results(result("gpu", "gpu-0"), result("mig", "gpu-2-mig-1g5gb-0")),
				classCfg(mpsMIG), classCfg(tsShort)),
			want: []got{{Request: "gpu", Device: "gpu-0", Strategy: v1beta1.StrategyTimeSlicing, Interval: "Short", ConfigIndex: 1},
				{Request: "mig", Device: "gpu-2-mig-1g5gb-0", Strategy: v1beta1.StrategyMPS, ConfigIndex: 0}},
		},
		{
			name:  "other drivers' configs and results are ignored",
			claim: newClaim("u", results(result("gpu", "gpu-0"), otherResult), other),
			want:  []got{{Request: "gpu", Device: "gpu-0", Strategy: v1beta1.StrategyExclusive, ConfigIndex: -1}},
		},
		{
			name:  "share ID and consumed memory",
			claim: newClaim("u", results(withMemory(shared(result("gpu", "gpu-0"), "s1"), "16Gi"))),
			want:  []got{{Request: "gpu", Device: "gpu-0", Strategy: v1beta1.StrategyExclusive, ConfigIndex: -1, Memory: 16 << 30, ShareID: "s1"}},
		},
		{
			name:    "GpuConfig on a MIG device",
			claim:   newClaim("u", results(result("mig", "gpu-2-mig-1g5gb-0")), claimCfg(tsShort, "mig")),
			wantErr: `claim ns/claim-u (u): status.allocation.devices.config[0]: GpuConfig from claim for request "mig" does not fit device "gpu-2-mig-1g5gb-0" (MIG device MIG-dddddddd-0000-0000-0000-000000000004 on GPU GPU-cccccccc-0000-0000-0000-000000000003) of request "mig": it needs a MigDeviceConfig`,
		},
		{
			name:    "MigDeviceConfig on a GPU",
			claim:   newClaim("u", results(result("gpu/sub", "gpu-0")), classCfg(mpsMIG, "gpu")),
			wantErr: `claim ns/claim-u (u): status.allocation.devices.config[0]: MigDeviceConfig from class for request "gpu" does not fit device "gpu-0" (GPU GPU-aaaaaaaa-0000-0000-0000-000000000001) of request "gpu/sub": it needs a GpuConfig`,
		},
		{
			name:    "invalid config names its place in the claim",
			claim:   newClaim("u", results(result("gpu", "gpu-0")), classCfg(exclusiveGPU), claimCfg(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Fast"}}}`, "gpu")),
			wantErr: `claim ns/claim-u (u): invalid GpuConfig: status.allocation.devices.config[1].opaque.parameters.sharing.timeSlicingConfig.interval: Unsupported value: "Fast": supported values: "Default", "Long", "Medium", "Short"`,
		},
		{
			name:    "unknown field",
			claim:   newClaim("u", results(result("gpu", "gpu-0")), claimCfg(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","replicas":2}}`, "gpu")),
			wantErr: `claim ns/claim-u (u): strict decoding error: unknown field "sharing.replicas"`,
		},
		{
			name:    "device not on this node",
			claim:   newClaim("u", results(result("gpu", "gpu-9"))),
			wantErr: `claim ns/claim-u (u): request "gpu": allocated device node-1/gpu-9 is not on this node`,
		},
		{
			name:    "not allocated",
			claim:   &resourceapi.ResourceClaim{},
			wantErr: `claim / () is not allocated`,
		},
	}
	m := sharing.NewManager("gpu.nvidia.com")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dcs, err := m.Resolve(tt.claim, lookup)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve error\n got: %v\nwant: %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			var gots []got
			for _, dc := range dcs {
				g := got{Request: dc.Request, Device: dc.DeviceName, Strategy: dc.Config.Strategy(), ConfigIndex: dc.ConfigIndex,
					Memory: dc.AllocatedMemoryBytes, ShareID: dc.ShareID}
				if gc, ok := dc.Config.(*v1beta1.GpuConfig); ok {
					g.Interval = gc.Interval()
				}
				gots = append(gots, g)
			}
			if diff := cmp.Diff(tt.want, gots); diff != "" {
				t.Errorf("Resolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveDriverName(t *testing.T) {
	c := claimCfg(tsShort, "gpu")
	c.Opaque.Driver = "gpu.example.com"
	r := result("gpu", "gpu-0")
	r.Driver = "gpu.example.com"
	claim := newClaim("u", results(r, result("gpu", "gpu-1")), c)
	dcs, err := sharing.NewManager("gpu.example.com").Resolve(claim, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if len(dcs) != 1 || dcs[0].DeviceName != "gpu-0" || dcs[0].Config.Strategy() != v1beta1.StrategyTimeSlicing {
		t.Errorf("Resolve with driver gpu.example.com = %+v, want gpu-0 with TimeSlicing only", dcs)
	}
	if got := dcs[0].Source(claim); got != "config[0] (GpuConfig from claim, requests [gpu])" {
		t.Errorf("Source = %q", got)
	}
}
