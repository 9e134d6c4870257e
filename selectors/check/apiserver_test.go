package check_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpudra/gpudra/selectors/check"
	"github.com/gpudra/gpudra/selectors/finding"
)

// ruleAt is a finding's rule and where it points, for comparing reports.
type ruleAt struct{ Rule, Object, Field string }

// TestCheckRefusesWhatTheAPIServerRefuses: what a default v1.37 API server (or the driver at
// prepare) refuses is an error finding with its rule, object and field; what it accepts is not.
func TestCheckRefusesWhatTheAPIServerRefuses(t *testing.T) {
	claim := func(meta, request string) string {
		return "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: " + meta + "\nspec:\n  devices:\n    requests:\n    - " + request + "\n"
	}
	exact := func(fields string) string {
		return "{name: r, exactly: {deviceClassName: gpu.nvidia.com" + fields + "}}"
	}
	withConfig := func(class, kind string) string {
		return "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n" +
			"    requests: [{name: r, exactly: {deviceClassName: " + class + "}}]\n" +
			"    config: [{requests: [r], opaque: {driver: gpu.nvidia.com, parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: " + kind + "}}}]\n"
	}
	cases := []struct {
		name     string
		manifest string
		versions []schema.GroupVersion
		want     []ruleAt
	}{
		{"empty", "", nil, []ruleAt{{finding.RuleEmpty, "", ""}}},
		{"comments only", "# nothing\n---\n", nil, []ruleAt{{finding.RuleEmpty, "", ""}}},
		{"ok", claim("{name: c}", exact("")), nil, nil},
		{"count 0 is defaulted", claim("{name: c}", exact(", count: 0")), nil, nil},
		{"count -3", claim("{name: c}", exact(", count: -3")), nil,
			[]ruleAt{{finding.RuleInvalidRequest, "ResourceClaim c", "spec.devices.requests[0].exactly.count"}}},
		{"All with a count", claim("{name: c}", exact(", allocationMode: All, count: 1")), nil,
			[]ruleAt{{finding.RuleInvalidRequest, "ResourceClaim c", "spec.devices.requests[0].exactly.count"}}},
		{"unknown allocation mode", claim("{name: c}", exact(", allocationMode: Some")), nil,
			[]ruleAt{{finding.RuleInvalidRequest, "ResourceClaim c", "spec.devices.requests[0].exactly.allocationMode"}}},
		{"subrequest count -1", claim("{name: c}", "{name: r, firstAvailable: [{name: s, deviceClassName: gpu.nvidia.com, count: -1}]}"), nil,
			[]ruleAt{{finding.RuleInvalidRequest, "ResourceClaim c", "spec.devices.requests[0].firstAvailable[0].count"}}},
		{"invalid name", claim("{name: My_Claim}", exact("")), nil, []ruleAt{{finding.RuleInvalidName, "ResourceClaim My_Claim", "metadata.name"}}},
		{"no name", claim("{}", exact("")), nil, []ruleAt{{finding.RuleInvalidName, "ResourceClaim ", "metadata.name"}}},
		{"invalid namespace", claim("{name: c, namespace: Team-A}", exact("")), nil,
			[]ruleAt{{finding.RuleInvalidName, "ResourceClaim Team-A/c", "metadata.namespace"}}},
		{"v1beta1 not served", "apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: x}\n", nil,
			[]ruleAt{{finding.RuleNotServed, "DeviceClass x", "apiVersion"}}},
		{"v1beta1 declared", "apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: x}\n",
			[]schema.GroupVersion{{Group: "resource.k8s.io", Version: "v1beta1"}}, nil},
		{"unknown group", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n", nil,
			[]ruleAt{{finding.RuleNotServed, "Widget w", "apiVersion"}}},
		{"unknown kind", "apiVersion: v1\nkind: Pood\nmetadata: {name: p}\n", nil, []ruleAt{{finding.RuleUnknownKind, "Pood p", "kind"}}},
		{"no kind", "metadata: {name: x}\nspec: {}\n", nil, []ruleAt{{finding.RuleMissingKind, "document 0", "kind"}}},
		{"no kind beside an object", claim("{name: c}", exact("")) + "---\nfoo: bar\n", nil, []ruleAt{{finding.RuleMissingKind, "document 1", "kind"}}},
		{"served other kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n", nil, nil},
		{"MigDeviceConfig on a full GPU", withConfig("gpu.nvidia.com", "MigDeviceConfig"), nil,
			[]ruleAt{{finding.RuleInvalidConfig, "ResourceClaim c", "spec.devices.config[0].requests[0]"}}},
		{"GpuConfig on a MIG device", withConfig("mig.nvidia.com", "GpuConfig"), nil,
			[]ruleAt{{finding.RuleInvalidConfig, "ResourceClaim c", "spec.devices.config[0].requests[0]"}}},
		{"GpuConfig on a full GPU", withConfig("gpu.nvidia.com", "GpuConfig"), nil, nil},
		{"MigDeviceConfig on a MIG device", withConfig("mig.nvidia.com", "MigDeviceConfig"), nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := check.NewChecker(check.WithAPIVersions(c.versions...)).Check(context.Background(), "m", []byte(c.manifest))
			if err != nil {
				t.Fatal(err)
			}
			var got []ruleAt
			for _, f := range r.Findings {
				if f.Severity == finding.SeverityError {
					got = append(got, ruleAt{f.Rule, f.Object, f.Field})
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("error findings (-want +got):\n%s\nall: %v", diff, r.Findings)
			}
		})
	}
}
