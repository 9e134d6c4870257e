package nodeplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

const (
	testNode   = "node-a"
	testDomain = "6f1c2a8e-3b7d-4c5e-9f10-2a3b4c5d6e7f"
)

// allocated is a claim allocated device of testNode for request "channel", with configs.
func allocated(device string, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "other", Driver: "gpu.nvidia.com", Pool: testNode, Device: device},
				{Request: "channel", Driver: computedomain.DriverName, Pool: testNode, Device: device},
			},
			Config: configs,
		}}}}
}

func opaque(driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}
}

const (
	channelSingle = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"` + testDomain + `"}`
	channelAll    = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"` + testDomain + `","allocationMode":"All"}`
	daemon        = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"` + testDomain + `"}`
)

// TestChannelConfig: the channel device's opaque config is decoded strictly, with errors that
// name the field and what is allowed; other drivers' configs and configs of other requests are
// ignored; the claim's own config (the last) wins.
func TestChannelConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		configs []resourceapi.DeviceAllocationConfiguration
		want    *v1beta1.ComputeDomainChannelConfig
		wantErr string
	}{
		{name: "single by default", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName, channelSingle)},
			want: channelWant(v1beta1.AllocationModeSingle)},
		{name: "all, for the request", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName, channelAll, "channel")},
			want: channelWant(v1beta1.AllocationModeAll)},
		{name: "other drivers and requests ignored", configs: []resourceapi.DeviceAllocationConfiguration{
			opaque("gpu.nvidia.com", `{"kind":"GpuConfig"}`), opaque(computedomain.DriverName, `{"bad":1}`, "other"),
			opaque(computedomain.DriverName, channelSingle)}, want: channelWant(v1beta1.AllocationModeSingle)},
		{name: "the last wins", configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(computedomain.DriverName, channelSingle), opaque(computedomain.DriverName, channelAll)}, want: channelWant(v1beta1.AllocationModeAll)},
		{name: "none", configs: []resourceapi.DeviceAllocationConfiguration{opaque("gpu.nvidia.com", channelSingle)},
			wantErr: "request channel: no opaque config of driver compute-domain.nvidia.com with a ComputeDomainChannelConfig"},
		{name: "unknown field", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName,
			`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"`+testDomain+`","numChannels":2}`)},
			wantErr: `ComputeDomainChannelConfig: unknown field "numChannels"`},
		{name: "field in the wrong case", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName,
			`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainId":"`+testDomain+`"}`)},
			wantErr: `unknown field "domainId"`},
		{name: "wrong apiVersion", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName,
			`{"apiVersion":"resource.nvidia.com/v1","kind":"ComputeDomainChannelConfig","domainID":"`+testDomain+`"}`)},
			wantErr: `apiVersion "resource.nvidia.com/v1": must be resource.nvidia.com/v1beta1`},
		{name: "daemon kind on a channel", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName, daemon)},
			wantErr: `kind "ComputeDomainDaemonConfig": must be ComputeDomainChannelConfig`},
		{name: "empty domainID", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName,
			`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":""}`)},
			wantErr: "ComputeDomainChannelConfig: domainID: required"},
		{name: "domainID not a UID", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName,
			`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"../../etc"}`)},
			wantErr: `domainID "../../etc": must be the ComputeDomain's UID`},
		{name: "bad allocationMode", configs: []resourceapi.DeviceAllocationConfiguration{opaque(computedomain.DriverName,
			`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"`+testDomain+`","allocationMode":"all"}`)},
			wantErr: `allocationMode "all": must be Single or All`},
		{name: "a bad config before the winner", configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(computedomain.DriverName, `[]`), opaque(computedomain.DriverName, channelSingle)},
			wantErr: "request channel: config 0 (from FromClaim): not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := channelConfig(allocated(ChannelDevice, tc.configs...), testNode)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func channelWant(mode v1beta1.AllocationMode) *v1beta1.ComputeDomainChannelConfig {
	c := &v1beta1.ComputeDomainChannelConfig{DomainID: testDomain, AllocationMode: mode}
	c.APIVersion, c.Kind = "resource.nvidia.com/v1beta1", v1beta1.ChannelConfigKind
	return c
}

// TestDaemonConfig: the daemon device's config is decoded as strictly, and a claim without a
// result for the device on this node is refused.
func TestDaemonConfig(t *testing.T) {
	got, err := daemonConfig(allocated(DaemonDevice, opaque(computedomain.DriverName, daemon)), testNode)
	if err != nil || got.DomainID != testDomain {
		t.Errorf("daemonConfig: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{"channel kind", allocated(DaemonDevice, opaque(computedomain.DriverName, channelSingle)), `kind "ComputeDomainChannelConfig": must be ComputeDomainDaemonConfig`},
		{"unknown field", allocated(DaemonDevice, opaque(computedomain.DriverName, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"`+testDomain+`","allocationMode":"All"}`)),
			`ComputeDomainDaemonConfig: unknown field "allocationMode"`},
		{"empty domainID", allocated(DaemonDevice, opaque(computedomain.DriverName, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig"}`)),
			"ComputeDomainDaemonConfig: domainID: required"},
		{"no result on this node", allocated(ChannelDevice, opaque(computedomain.DriverName, daemon)), "no allocation result for device daemon-0 of pool node-a"},
		{"not allocated", &resourceapi.ResourceClaim{}, "claim is not allocated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := daemonConfig(tc.claim, testNode); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
