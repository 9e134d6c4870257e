package check_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/objects"
	"github.com/gpudra/gpudra/resourcepool"
	"github.com/gpudra/gpudra/selectors/check"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
)

// testClique is the NVLink clique of the test's compute-domain devices.
const testClique = "c0ffee00-0000-4000-8000-000000000001.3"

// withIMEX is a machine's slices plus the compute-domain plugin's slice of node-1 in testClique.
func withIMEX(t *testing.T, m seltest.Machine) []*resourceapi.ResourceSlice {
	t.Helper()
	pool, err := resourcepool.New("node-1", objects.Devices(testClique))
	if err != nil {
		t.Fatal(err)
	}
	cd, err := resourcepool.ResourceSlices(computedomain.DriverName, "node-1", pool)
	if err != nil {
		t.Fatal(err)
	}
	return append(m.Slices(t), cd...)
}

// domainDoc is a ComputeDomain with spec as its spec (YAML, indented by four spaces).
func domainDoc(spec string) string {
	return "apiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomain\nmetadata:\n  name: d\nspec:\n" + spec
}

// channelPod is a pod of the channel template "ch".
const channelPod = `apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  containers:
  - name: c
    image: x
    resources:
      claims:
      - name: ch
  resourceClaims:
  - name: ch
    resourceClaimTemplateName: ch
`

// cdClaim is what a test compares of a claim's result.
type cdClaim struct {
	Claim, Device string
	Allocated     bool
	// Reason is the first reason's text up to its first colon.
	Reason string
}

func cdClaims(rs []check.ClaimResult) []cdClaim {
	var out []cdClaim
	for _, r := range rs {
		c := cdClaim{Claim: r.Claim, Allocated: r.Allocated}
		for _, d := range r.Devices {
			c.Device = d.Driver + "/" + d.Device
		}
		if len(r.Reasons) > 0 {
			c.Reason, _, _ = strings.Cut(r.Reasons[0], ":")
		}
		out = append(out, c)
	}
	return out
}

// cdRules are the findings about ComputeDomains and the references to their templates.
var cdRules = []string{finding.RuleNotServed, finding.RuleUnknownKind, finding.RuleInvalidComputeDomain, finding.RuleMissingReference}

// TestCheckComputeDomains: a ComputeDomain is served (the driver's CRD), validated as the CRD
// does with findings naming the field, provides its channel template to the pods that name it,
// and the template's claims are allocated on the machine's IMEX channel, or explained.
func TestCheckComputeDomains(t *testing.T) {
	a100 := seltest.Machine{Name: "dgx-a100-40gb"}
	valid := domainDoc("  numNodes: 1\n  channel:\n    resourceClaimTemplate:\n      name: ch\n")
	cases := []struct {
		name     string
		manifest string
		imex     bool
		// want are the findings of cdRules, as "rule field".
		want       []string
		wantClaims []cdClaim
	}{
		{"served, template provided, channel allocated", valid + "---\n" + channelPod, true, nil,
			[]cdClaim{{Claim: "default/ch-1", Allocated: true, Device: "compute-domain.nvidia.com/channel-0"}}},
		{"no clique: no channel device", valid + "---\n" + channelPod, false, nil,
			[]cdClaim{{Claim: "default/ch-1", Reason: "no device of class compute-domain-default-channel.nvidia.com on this machine"}}},
		{"more nodes than the machine has", strings.Replace(valid, "numNodes: 1", "numNodes: 2", 1) + "---\n" + channelPod +
			"---\n" + strings.Replace(channelPod, "name: p\n", "name: q\n", 1), true, nil,
			[]cdClaim{{Claim: "default/ch-1", Allocated: true, Device: "compute-domain.nvidia.com/channel-0"},
				{Claim: "default/ch-2", Reason: "ComputeDomain d spans 2 nodes (spec.numNodes), one channel per node"}}},
		{"a domain without a channel provides no template", domainDoc("  numNodes: 1\n") + "---\n" + channelPod, true,
			[]string{"missing-reference spec.resourceClaims[0].resourceClaimTemplateName"}, nil},
		{"another kind of the group is not served", "apiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomainClique\nmetadata:\n  name: x\n", true,
			[]string{"not-served apiVersion"}, nil},
		{"unknown field", domainDoc("  numNodes: 1\n  nodes: 2\n"), true, []string{"invalid-compute-domain "}, nil},
		{"negative numNodes", domainDoc("  numNodes: -1\n"), true, []string{"invalid-compute-domain spec.numNodes"}, nil},
		{"template name not a DNS subdomain", domainDoc("  channel:\n    resourceClaimTemplate:\n      name: Bad_Name\n"), true,
			[]string{"invalid-compute-domain spec.channel.resourceClaimTemplate.name"}, nil},
		{"unknown allocationMode", domainDoc("  channel:\n    allocationMode: Some\n    resourceClaimTemplate:\n      name: ch\n"), true,
			[]string{"invalid-compute-domain spec.channel.allocationMode"}, nil},
		{"allocationMode All", domainDoc("  channel:\n    allocationMode: All\n    resourceClaimTemplate:\n      name: ch\n"), true, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := a100.Slices(t)
			if tc.imex {
				rs = withIMEX(t, a100)
			}
			r, err := check.NewChecker(check.WithMachine("m", rs)).Check(context.Background(), "t.yaml", []byte(tc.manifest))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range r.Findings {
				if slices.Contains(cdRules, f.Rule) {
					got = append(got, f.Rule+" "+f.Field)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s\nall: %v", diff, r.Findings)
			}
			if diff := cmp.Diff(tc.wantClaims, cdClaims(r.Claims)); diff != "" {
				t.Errorf("claims (-want +got):\n%s\nall: %+v", diff, r.Claims)
			}
			if wantOK := tc.want == nil && !slices.ContainsFunc(tc.wantClaims, func(c cdClaim) bool { return !c.Allocated }); r.OK() != wantOK {
				t.Errorf("OK() = %v, want %v: %v %v", r.OK(), wantOK, r.Findings, r.Claims)
			}
		})
	}
}

// TestComputeDomainFindingsSayWhatIsAllowed: each invalid value's message names the value and
// what the CRD allows.
func TestComputeDomainFindingsSayWhatIsAllowed(t *testing.T) {
	cases := map[string]string{
		domainDoc("  numNodes: -1\n"): "Invalid value: -1: must be 0 or more",
		domainDoc("  channel:\n    allocationMode: Some\n    resourceClaimTemplate:\n      name: ch\n"): `Unsupported value: "Some": supported values: "Single", "All"`,
		domainDoc("  numNodes: 1\n  nodes: 2\n"):                                                        "the CRD allows spec.numNodes and spec.channel",
	}
	for manifest, want := range cases {
		r, err := check.NewChecker().Check(context.Background(), "t.yaml", []byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		var msgs []string
		for _, f := range r.Findings {
			msgs = append(msgs, fmt.Sprint(f))
		}
		if !strings.Contains(strings.Join(msgs, "\n"), want) {
			t.Errorf("%s\nfindings %q, want one with %q", manifest, msgs, want)
		}
	}
}
