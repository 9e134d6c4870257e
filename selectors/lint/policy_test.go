package lint_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

func workloadObjects(t *testing.T, file string) []manifest.Object {
	t.Helper()
	data, err := os.ReadFile("../../examples/deploy/workloads/" + file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// violation is the part of a violation the tables compare.
type violation struct{ Object, Request, Rule string }

func violations(vs []lint.Violation) []violation {
	var out []violation
	for _, v := range vs {
		out = append(out, violation{v.Object, v.Request, v.Rule})
	}
	return out
}

// TestSeed001CrossGuardPolicy is seed 001's Pulumi CrossGuard policy: block the full-GPU MIG
// profiles 4g.20gb, 7g.40gb and 7g.80gb, allow the balanced ones. The workloads from that seed
// pass, except mig-invalid-template, which the seed's policy run rejects.
func TestSeed001CrossGuardPolicy(t *testing.T) {
	seed := &lint.Policy{BlockedMIGProfiles: []string{"4g.20gb", "7g.40gb", "7g.80gb"}}
	patterns := &lint.Policy{BlockedMIGProfiles: []string{"4g.*", "7g.*"}}
	for _, p := range []*lint.Policy{seed, patterns} {
		for _, f := range []string{"05-mig-1g.yaml", "06-mig-2g.yaml", "07-mig-3g.yaml", "08-mig-1g-deployment.yaml", "09-mig-shared-claim.yaml"} {
			if vs := p.Evaluate(context.Background(), workloadObjects(t, f), lint.Environment{}); len(vs) != 0 {
				t.Errorf("%s: %v", f, vs)
			}
		}
		vs := p.Evaluate(context.Background(), workloadObjects(t, "10-mig-invalid-profile.yaml"), lint.Environment{})
		want := []lint.Violation{{Object: "ResourceClaimTemplate mig-invalid-template", Request: "mig-gpu", Rule: lint.PolicyBlockedProfile,
			UsedBy: []string{"Pod mig-invalid-pod"}}}
		if diff := cmp.Diff(want, vs, cmpopts.IgnoreFields(lint.Violation{}, "Message")); diff != "" {
			t.Errorf("violations (-want +got):\n%s", diff)
		}
		if len(vs) == 1 && !strings.Contains(vs[0].Message, "7g.80gb") {
			t.Errorf("message %q does not name the profile", vs[0].Message)
		}
	}
}

// TestPolicyReadsProfilesFromTheMachine: a selector that names no profile literally is
// checked by what it matches on the machine.
func TestPolicyReadsProfilesFromTheMachine(t *testing.T) {
	yaml := `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: big}
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig.nvidia.com
        selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].profile.startsWith('7g')"}}]
`
	objs, err := manifest.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p := &lint.Policy{BlockedMIGProfiles: []string{"7g.*"}}
	if vs := p.Evaluate(context.Background(), objs, lint.Environment{}); len(vs) != 0 {
		t.Errorf("without a machine: %v", vs)
	}
	dyn := seltest.Machine{Name: "dgx-a100-80gb", BOpts: []gpudra.Option{seltest.DynamicMIG}}
	vs := p.Evaluate(context.Background(), objs, lint.Environment{Machine: "dgx-a100-80gb", Slices: dyn.Slices(t)})
	if diff := cmp.Diff([]violation{{"ResourceClaim big", "mig", lint.PolicyBlockedProfile}}, violations(vs)); diff != "" {
		t.Errorf("on dynamic MIG (-want +got):\n%s", diff)
	}
}

func TestPolicyRules(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		policy lint.Policy
		file   string
		ns     string
		want   []violation
	}{
		{"allowed profiles: 2g is not allowed", lint.Policy{AllowedMIGProfiles: []string{"1g.5gb"}}, "06-mig-2g.yaml", "",
			[]violation{{"ResourceClaimTemplate mig-medium-template", "mig-medium", lint.PolicyAllowedProfiles}}},
		{"allowed profiles: 1g is", lint.Policy{AllowedMIGProfiles: []string{"1g.*"}}, "05-mig-1g.yaml", "", nil},
		{"two GPUs in one request", lint.Policy{MaxGPUsPerClaim: 1}, "02-two-gpus.yaml", "",
			[]violation{{"ResourceClaimTemplate two-unique-gpus", "gpus", lint.PolicyMaxGPUs}}},
		{"two claims of one GPU each", lint.Policy{MaxGPUsPerClaim: 1}, "14-two-claims-one-container.yaml", "", nil},
		{"prioritized list counts the larger alternative", lint.Policy{MaxGPUsPerClaim: 1}, "36-prioritized-list.yaml", "", nil},
		{"four GPUs", lint.Policy{MaxGPUsPerClaim: 3}, "32-multi-gpu-numa.yaml", "",
			[]violation{{"ResourceClaimTemplate four-gpus-one-numa-node", "gpus", lint.PolicyMaxGPUs}}},
		{"time-slicing required and configured", lint.Policy{RequiredSharing: map[string]v1beta1.SharingStrategy{"default": v1beta1.StrategyTimeSlicing}}, "03-time-slicing.yaml", "", nil},
		{"time-slicing required, MPS configured", lint.Policy{RequiredSharing: map[string]v1beta1.SharingStrategy{"default": v1beta1.StrategyTimeSlicing}}, "04-mps.yaml", "",
			[]violation{{"ResourceClaimTemplate mps-gpu-template", "shared-gpu", lint.PolicySharing}}},
		{"no config is exclusive", lint.Policy{RequiredSharing: map[string]v1beta1.SharingStrategy{"*": v1beta1.StrategyMPS}}, "01-exclusive-gpu.yaml", "",
			[]violation{{"ResourceClaimTemplate single-gpu", "gpu", lint.PolicySharing}}},
		{"another namespace's rule does not apply", lint.Policy{RequiredSharing: map[string]v1beta1.SharingStrategy{"inference": v1beta1.StrategyMPS}}, "01-exclusive-gpu.yaml", "", nil},
		{"the namespace objects are applied to", lint.Policy{RequiredSharing: map[string]v1beta1.SharingStrategy{"inference": v1beta1.StrategyMPS}}, "01-exclusive-gpu.yaml", "inference",
			[]violation{{"ResourceClaimTemplate single-gpu", "gpu", lint.PolicySharing}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.file == "" {
				return
			}
			got := tc.policy.Evaluate(ctx, workloadObjects(t, tc.file), lint.Environment{Namespace: tc.ns})
			if diff := cmp.Diff(tc.want, violations(got)); diff != "" {
				t.Errorf("violations (-want +got):\n%s\n%v", diff, got)
			}
		})
	}
}

// TestPolicySharingFromTheDeviceClass: a class's configuration applies unless the claim
// overrides it.
func TestPolicySharingFromTheDeviceClass(t *testing.T) {
	yaml := `apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: shared-gpu}
spec:
  selectors: [{cel: {expression: "device.driver == 'gpu.nvidia.com'"}}]
  config:
  - opaque: {driver: gpu.nvidia.com, parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: GpuConfig, sharing: {strategy: TimeSlicing}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: inherits}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: shared-gpu}}]}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: overrides}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: shared-gpu}}]
    config:
    - opaque: {driver: gpu.nvidia.com, parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: GpuConfig, sharing: {strategy: MPS}}}
`
	objs, err := manifest.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p := &lint.Policy{RequiredSharing: map[string]v1beta1.SharingStrategy{"*": v1beta1.StrategyTimeSlicing}}
	got := violations(p.Evaluate(context.Background(), objs, lint.Environment{}))
	if diff := cmp.Diff([]violation{{"ResourceClaim overrides", "gpu", lint.PolicySharing}}, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := lint.ParsePolicy([]byte("blockedMIGProfiles: ['7g.*', 4g.20gb]\nmaxGPUsPerClaim: 2\nrequiredSharing: {inference: TimeSlicing}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &lint.Policy{BlockedMIGProfiles: []string{"7g.*", "4g.20gb"}, MaxGPUsPerClaim: 2,
		RequiredSharing: map[string]v1beta1.SharingStrategy{"inference": v1beta1.StrategyTimeSlicing}}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
	for doc, wantErr := range map[string]string{
		"blockedMIGProfiles: [7g]":            "blockedMIGProfiles[0]",
		"maxGPUsPerClaim: -1":                 "maxGPUsPerClaim",
		"requiredSharing: {x: Sometimes}":     "requiredSharing[x]",
		"blockedProfiles: [7g.40gb]":          `unknown field "blockedProfiles"`,
		"allowedMIGProfiles: ['[']":           "bad pattern",
		"requiredSharing: {'*': Exclusive}\n": "",
	} {
		_, err := lint.ParsePolicy([]byte(doc))
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("ParsePolicy(%q) = %v, want %q", doc, err, wantErr)
		}
	}
}

// TestPolicyCountsTheLargestAlternative: a prioritized list allocates one of its subrequests,
// so the claim can get at most the largest of them.
func TestPolicyCountsTheLargestAlternative(t *testing.T) {
	yaml := `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: gpus
      firstAvailable:
      - {name: two, deviceClassName: gpu.nvidia.com, count: 2}
      - {name: one, deviceClassName: gpu.nvidia.com, count: 1}
`
	objs, err := manifest.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for max, want := range map[int]int{2: 0, 1: 1} {
		if got := (&lint.Policy{MaxGPUsPerClaim: max}).Evaluate(context.Background(), objs, lint.Environment{}); len(got) != want {
			t.Errorf("max %d: %v, want %d violations", max, got, want)
		}
	}
}
