package lint_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/lint"
	"github.com/gpudra/gpudra/selectors/manifest"
)

// where is the part of an object finding the table compares.
type where struct {
	Rule     string
	Severity finding.Severity
	Object   string
	Field    string
}

func located(fs []finding.Finding) []where {
	var out []where
	for _, f := range fs {
		out = append(out, where{f.Rule, f.Severity, f.Object, f.Field})
	}
	return out
}

func TestLintObjects(t *testing.T) {
	const head = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\n"
	cases := []struct {
		name     string
		manifest string
		want     []where
	}{
		{
			name:     "request without exactly",
			manifest: head + "spec: {devices: {requests: [{name: gpu}]}}\n",
			want:     []where{{finding.RuleMissingExactly, finding.SeverityError, "ResourceClaim c", "spec.devices.requests[0]"}},
		},
		{
			name:     "unknown class",
			manifest: head + "spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu-large}}]}}\n",
			want:     []where{{finding.RuleUnknownClass, finding.SeverityError, "ResourceClaim c", "spec.devices.requests[0].exactly.deviceClassName"}},
		},
		{
			name: "unqualified topology attribute in a constraint",
			manifest: head + `spec:
  devices:
    requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}]
    constraints: [{requests: [gpus], matchAttribute: pcieRoot}]
`,
			want: []where{{finding.RuleUnqualifiedName, finding.SeverityError, "ResourceClaim c", "spec.devices.constraints[0].matchAttribute"}},
		},
		{
			name: "constraint and config naming requests that do not exist",
			manifest: head + `spec:
  devices:
    requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com}}]
    constraints: [{requests: [gpu], matchAttribute: resource.kubernetes.io/numaNode}]
    config:
    - requests: [gpu]
      opaque: {driver: gpu.nvidia.com, parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: GpuConfig}}
`,
			want: []where{
				{finding.RuleUnknownRequest, finding.SeverityError, "ResourceClaim c", "spec.devices.constraints[0].requests[0]"},
				{finding.RuleUnknownRequest, finding.SeverityError, "ResourceClaim c", "spec.devices.config[0].requests[0]"},
			},
		},
		{
			name: "invalid opaque config",
			manifest: head + `spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
    config:
    - opaque:
        driver: gpu.nvidia.com
        parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: GpuConfig, sharing: {strategy: TimeSlicing, timeSlicingConfig: {interval: Forever}}}
`,
			want: []where{{finding.RuleInvalidConfig, finding.SeverityError, "ResourceClaim c", "spec.devices.config[0].opaque.parameters"}},
		},
		{
			name: "expression finding carries object and field",
			manifest: `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].memory >= '40Gi'"}}]
`,
			want: []where{{finding.RuleAttributeIsCapacity, finding.SeverityError, "ResourceClaimTemplate ml/t", "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"}},
		},
		{
			name: "pod references",
			manifest: `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: c
    image: x
    resources: {claims: [{name: gpu}, {name: other}]}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: missing}]
`,
			want: []where{
				{finding.RuleMissingReference, finding.SeverityWarning, "Pod p", "spec.resourceClaims[0].resourceClaimTemplateName"},
				{finding.RuleMissingReference, finding.SeverityError, "Pod p", "spec.containers[0].resources.claims[1].name"},
			},
		},
	}
	l := lint.NewLinter(lint.Environment{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := manifest.Decode([]byte(tc.manifest))
			if err != nil {
				t.Fatal(err)
			}
			got := l.Objects(context.Background(), objs)
			if diff := cmp.Diff(tc.want, located(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("findings (-want +got):\n%s\n%v", diff, got)
			}
		})
	}
}

// TestLintObjectsOnMachine: what requests select on dgx-a100-40gb (full GPUs, no MIG).
func TestLintObjectsOnMachine(t *testing.T) {
	yaml := `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: profile-on-gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}}]
    - name: redundant
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].architecture == 'Ampere'"}}]
    - name: alternatives
      firstAvailable:
      - {name: whole, deviceClassName: gpu.nvidia.com}
      - {name: slice, deviceClassName: mig.nvidia.com}
    - name: nothing
      firstAvailable:
      - {name: h100, deviceClassName: gpu.nvidia.com, selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"}}]}
      - {name: slice, deviceClassName: mig.nvidia.com}
    - name: fallback-exists
      firstAvailable:
      - {name: h100, deviceClassName: gpu.nvidia.com, selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"}}]}
      - {name: slice, deviceClassName: mig.nvidia.com}
      - {name: whole, deviceClassName: gpu.nvidia.com}
    - name: minor-on-mig
      exactly:
        deviceClassName: mig.nvidia.com
        selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].minor == 0"}}]
    - name: guarded-profile
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors: [{cel: {expression: "!has(device.attributes['gpu.nvidia.com'].profile)"}}]
`
	objs, err := manifest.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	l := lint.NewLinter(lint.Environment{Machine: "dgx-a100-40gb", Slices: seltest.Machine{Name: "dgx-a100-40gb"}.Slices(t)})
	want := []where{
		// The class is what is wrong, not the selector: said before any evaluation.
		{finding.RuleWrongClass, finding.SeverityError, "ResourceClaim c", "spec.devices.requests[0].exactly.selectors[0].cel.expression"},
		{finding.RuleMatchesEverything, finding.SeverityInfo, "ResourceClaim c", "spec.devices.requests[1].exactly.selectors"},
		// A last choice that does not exist here is no fallback here...
		{finding.RuleMatchesNothing, finding.SeverityWarning, "ResourceClaim c", "spec.devices.requests[2].firstAvailable[1].selectors"},
		// ... and when no choice exists, each is said.
		{finding.RuleMatchesNothing, finding.SeverityWarning, "ResourceClaim c", "spec.devices.requests[3].firstAvailable[0].selectors"},
		{finding.RuleMatchesNothing, finding.SeverityWarning, "ResourceClaim c", "spec.devices.requests[3].firstAvailable[1].selectors"},
		// An earlier choice that does not exist here is what firstAvailable is for.
		{finding.RuleMatchesNothing, finding.SeverityInfo, "ResourceClaim c", "spec.devices.requests[4].firstAvailable[0].selectors"},
		{finding.RuleMatchesNothing, finding.SeverityInfo, "ResourceClaim c", "spec.devices.requests[4].firstAvailable[1].selectors"},
		{finding.RuleWrongClass, finding.SeverityError, "ResourceClaim c", "spec.devices.requests[5].exactly.selectors[0].cel.expression"},
		// A read under has() is guarded: no wrong-class; it then matches every GPU.
		{finding.RuleMatchesEverything, finding.SeverityInfo, "ResourceClaim c", "spec.devices.requests[6].exactly.selectors"},
	}
	got := l.Objects(context.Background(), objs)
	if diff := cmp.Diff(want, located(got)); diff != "" {
		t.Errorf("findings (-want +got):\n%s\n%v", diff, got)
	}
	if len(got) > 0 && !strings.HasPrefix(got[0].Message, "`profile` exists only on MIG devices: use mig.nvidia.com") {
		t.Errorf("wrong-class message = %q, want it to name the attribute and the class to use", got[0].Message)
	}
}

// TestLintTemplatesOfTheEnvironment: a pod may name a template of Environment.Templates (one a
// ComputeDomain's controller makes); any other missing template is still a finding.
func TestLintTemplatesOfTheEnvironment(t *testing.T) {
	pod := `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: x, resources: {claims: [{name: a}, {name: b}]}}]
  resourceClaims:
  - {name: a, resourceClaimTemplateName: provided}
  - {name: b, resourceClaimTemplateName: absent}
`
	objs, err := manifest.Decode([]byte(pod))
	if err != nil {
		t.Fatal(err)
	}
	provided := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "provided"}}
	cases := []struct {
		name      string
		templates []*resourceapi.ResourceClaimTemplate
		want      []where
	}{
		{"none provided", nil, []where{
			{finding.RuleMissingReference, finding.SeverityWarning, "Pod p", "spec.resourceClaims[0].resourceClaimTemplateName"},
			{finding.RuleMissingReference, finding.SeverityWarning, "Pod p", "spec.resourceClaims[1].resourceClaimTemplateName"}}},
		{"one provided", []*resourceapi.ResourceClaimTemplate{provided}, []where{
			{finding.RuleMissingReference, finding.SeverityWarning, "Pod p", "spec.resourceClaims[1].resourceClaimTemplateName"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := lint.NewLinter(lint.Environment{Templates: tc.templates}).Objects(context.Background(), objs)
			if diff := cmp.Diff(tc.want, located(got)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}
