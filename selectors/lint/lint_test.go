package lint_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/lint"
)

// got is the part of a finding the table tests compare.
type got struct {
	Rule     string
	Severity finding.Severity
	Fixed    string
}

func project(fs []finding.Finding) []got {
	var out []got
	for _, f := range fs {
		out = append(out, got{f.Rule, f.Severity, f.Fixed})
	}
	return out
}

// TestLintExpression: one case per rule, on its own (no machine) and on dgx-a100-40gb with
// all-balanced MIG. Expected fixes are written from the attribute contract (DESIGN.md), not
// from the linter's output.
func TestLintExpression(t *testing.T) {
	const d = `device.attributes['gpu.nvidia.com']`
	const capMem = `device.capacity['gpu.nvidia.com'].memory`
	cases := []struct {
		name      string
		expr      string
		want      []got // without a machine
		onMachine []got // on dgx-a100-40gb all-balanced; nil means the same as want
	}{
		{name: "clean class selector", expr: `device.driver == 'gpu.nvidia.com' && ` + d + `.type == 'mig'`},
		{
			name: "full GPUs on a machine with MIG everywhere",
			expr: `device.driver == 'gpu.nvidia.com' && ` + d + `.type == 'gpu'`, want: []got{},
			onMachine: []got{{Rule: finding.RuleMatchesNothing, Severity: finding.SeverityWarning}},
		},
		{
			name: "seed 003: memory read as an attribute domain",
			expr: `device.driver == 'gpu.nvidia.com' && device.attributes['memory'] >= 40000`,
			want: []got{
				{finding.RuleNameAsDomain, finding.SeverityError, `device.driver == 'gpu.nvidia.com' && ` + capMem + `.compareTo(quantity('40000Mi')) >= 0`},
				{finding.RuleCompile, finding.SeverityError, `device.driver == 'gpu.nvidia.com' && ` + capMem + `.compareTo(quantity('40000Mi')) >= 0`},
			},
		},
		{
			name: "capacity read as an attribute",
			expr: d + `.memory >= '40Gi'`,
			want: []got{{finding.RuleAttributeIsCapacity, finding.SeverityError, capMem + `.compareTo(quantity('40Gi')) >= 0`}},
		},
		{
			name: "attribute read as a capacity",
			expr: `device.capacity['gpu.nvidia.com'].productName == 'x'`,
			want: []got{
				{finding.RuleCapacityIsAttribute, finding.SeverityError, d + `.productName == 'x'`},
				{finding.RuleCompile, finding.SeverityError, d + `.productName == 'x'`},
			},
		},
		{
			name: "unknown attribute with a synonym",
			expr: d + `.model == 'NVIDIA A100-SXM4-40GB'`,
			want: []got{{finding.RuleUnknownAttribute, finding.SeverityError, d + `.productName == 'NVIDIA A100-SXM4-40GB'`}},
		},
		{
			name: "misspelled attribute",
			expr: d + `.architecure == 'Ampere'`,
			want: []got{{finding.RuleUnknownAttribute, finding.SeverityError, d + `.architecture == 'Ampere'`}},
		},
		{
			name: "standard attribute in the driver's domain",
			expr: d + `.pcieRoot == 'pci0000:07'`,
			want: []got{{finding.RuleWrongDomain, finding.SeverityError, `device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:07'`}},
		},
		{
			name: "driver attribute in the standard domain",
			expr: `device.attributes['resource.kubernetes.io'].productName == 'x'`,
			want: []got{{finding.RuleWrongDomain, finding.SeverityError, d + `.productName == 'x'`}},
		},
		{
			name: "unknown domain",
			expr: `device.attributes['nvidia.com'].productName == 'x'`,
			want: []got{{finding.RuleUnknownDomain, finding.SeverityError, d + `.productName == 'x'`}},
		},
		{
			name: "version compared as a string",
			expr: d + `.driverVersion >= '550.54.15'`,
			want: []got{{finding.RuleVersionAsString, finding.SeverityError, d + `.driverVersion.compareTo(semver('550.54.15')) >= 0`}},
		},
		{
			name: "version compared with a number, flipped",
			expr: `8.0 <= ` + d + `.cudaComputeCapability`,
			want: []got{
				{finding.RuleVersionAsString, finding.SeverityError, d + `.cudaComputeCapability.compareTo(semver('8.0.0')) >= 0`},
			},
		},
		{
			name: "string function on a version",
			expr: d + `.driverVersion.startsWith('580')`,
			want: []got{{Rule: finding.RuleVersionAsString, Severity: finding.SeverityError}},
		},
		{
			name: "quantity compared with a number",
			expr: capMem + ` > 1000`,
			want: []got{
				{finding.RuleQuantityComparison, finding.SeverityError, capMem + `.compareTo(quantity('1000Mi')) > 0`},
				{finding.RuleCompile, finding.SeverityError, capMem + `.compareTo(quantity('1000Mi')) > 0`},
			},
		},
		{
			name:      "quantity equality",
			expr:      capMem + ` == quantity('80Gi')`,
			want:      []got{{Rule: finding.RuleQuantityComparison, Severity: finding.SeverityWarning}},
			onMachine: []got{{Rule: finding.RuleQuantityComparison, Severity: finding.SeverityWarning}, {Rule: finding.RuleMatchesNothing, Severity: finding.SeverityWarning}},
		},
		{
			name: "quantity on the left of a flipped comparison",
			expr: `'40Gi' <= ` + d + `.memory`,
			want: []got{{finding.RuleAttributeIsCapacity, finding.SeverityError, capMem + `.compareTo(quantity('40Gi')) >= 0`}},
		},
		{
			name: "int attribute compared with a string",
			expr: d + `.index == '3'`,
			want: []got{{finding.RuleTypeMismatch, finding.SeverityError, d + `.index == 3`}},
		},
		{
			name: "unknown type value",
			expr: d + `.type == 'GPU'`,
			want: []got{{Rule: finding.RuleUnknownValue, Severity: finding.SeverityError}},
		},
		{
			name: "profile that is no MIG profile",
			expr: d + `.profile == '3g40gb'`,
			want: []got{{Rule: finding.RuleUnknownProfile, Severity: finding.SeverityError}},
		},
		{
			name:      "3g.40gb on an A100-40GB (the issue's example)",
			expr:      d + `.profile == '3g.40gb'`,
			onMachine: []got{{finding.RuleUnknownProfile, finding.SeverityError, d + `.profile == '3g.20gb'`}},
		},
		{
			name:      "profile list",
			expr:      d + `.profile in ['1g.5gb', '1g.10gb', '2g.20gb']`,
			onMachine: []got{{finding.RuleUnknownProfile, finding.SeverityError, d + `.profile in ['1g.5gb', '1g.10gb', '2g.10gb']`}},
		},
		{
			name:      "selector that matches nothing on the machine",
			expr:      d + `.productName == 'NVIDIA H100 80GB HBM3'`,
			onMachine: []got{{Rule: finding.RuleMatchesNothing, Severity: finding.SeverityWarning}},
		},
		{
			name:      "runtime error on the machine (MIG devices have no minor)",
			expr:      d + `.minor == 0`,
			onMachine: []got{{Rule: finding.RuleRuntimeError, Severity: finding.SeverityError}},
		},
		{
			name:      "an attribute value is no condition",
			expr:      d + `.type`,
			want:      []got{{Rule: finding.RuleTypeMismatch, Severity: finding.SeverityError}},
			onMachine: []got{{Rule: finding.RuleTypeMismatch, Severity: finding.SeverityError}},
		},
		{
			name: "syntax error",
			expr: d + `.type == `,
			want: []got{{Rule: finding.RuleCompile, Severity: finding.SeverityError}},
		},
	}
	ctx := context.Background()
	bare := lint.NewLinter(lint.Environment{})
	a100 := lint.NewLinter(lint.Environment{Machine: "dgx-a100-40gb", Slices: seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}.Slices(t)})
	c := selectors.NewCompiler()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gotBare := bare.Expression(ctx, tc.expr)
			if diff := cmp.Diff(tc.want, project(gotBare), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("without a machine (-want +got):\n%s\n%v", diff, gotBare)
			}
			wantM := tc.onMachine
			if wantM == nil {
				wantM = tc.want
			}
			gotM := a100.Expression(ctx, tc.expr)
			if diff := cmp.Diff(wantM, project(gotM), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("on dgx-a100-40gb (-want +got):\n%s\n%v", diff, gotM)
			}
			for _, f := range append(gotBare, gotM...) {
				if f.Message == "" {
					t.Errorf("finding %s has no message", f.Rule)
				}
				if f.Severity == finding.SeverityError && f.Suggestion == "" && f.Fixed == "" && f.Rule != finding.RuleCompile {
					t.Errorf("error %s has no suggestion", f.Rule)
				}
				if f.Fixed != "" {
					if _, err := c.Compile(f.Fixed); err != nil {
						t.Errorf("fix %q does not compile: %v", f.Fixed, err)
					}
				}
			}
		})
	}
}

// TestLintPositions: findings point at the offending node, 1-based, across lines.
func TestLintPositions(t *testing.T) {
	expr := "device.driver == 'gpu.nvidia.com' &&\n  device.attributes['gpu.nvidia.com'].profile == '9g.1gb'"
	fs := lint.NewLinter(lint.Environment{}).Expression(context.Background(), expr)
	if len(fs) != 1 {
		t.Fatalf("findings = %v, want one", fs)
	}
	col := strings.Index(strings.Split(expr, "\n")[1], "'9g.1gb'") + 1
	if fs[0].Line != 2 || fs[0].Column != col {
		t.Errorf("position = %d:%d, want 2:%d", fs[0].Line, fs[0].Column, col)
	}
}
