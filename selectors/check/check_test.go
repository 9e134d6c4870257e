package check_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors/check"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
)

func checkFile(t *testing.T, path string, m seltest.Machine, opts ...check.CheckerOption) *check.Report {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]check.CheckerOption{check.WithMachine(m.Name, m.Slices(t))}, opts...)
	r, err := check.NewChecker(opts...).Check(context.Background(), path, data)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCheckExplainsWhyNothingFits: the reasons name the request, the selector or constraint
// that rejects devices, and the devices' values, for the workloads that are meant to fail.
func TestCheckExplainsWhyNothingFits(t *testing.T) {
	cases := []struct {
		file string
		on   seltest.Machine
		// want are substrings of the unschedulable claim's reasons, in order.
		want []string
	}{
		{"10-mig-invalid-profile.yaml", seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}, []string{
			`request "mig-gpu" (1 of class mig.nvidia.com): 0 of 32 devices usable`,
			"32 rejected by request selector #0",
			"profile 1g.5gb ×16, 2g.10gb ×8, 3g.20gb ×8",
		}},
		{"31-mig-invalid-layout.yaml", seltest.Machine{Name: "dgx-a100-80gb", BOpts: []gpudra.Option{seltest.DynamicMIG}}, []string{
			`request "large" (2 of class mig.nvidia.com): 16 of 208 devices usable`,
			`request "small" (1 of class mig.nvidia.com): 56 of 208 devices usable`,
			`requests "large" fit together`,
			`but then request "small" does not`,
			"7 need counters of gpu-0-counter-set that allocated devices already use",
			"49 excluded by the constraint on gpu.nvidia.com/parentUUID",
		}},
		{"33-two-gpus-same-pcie-root.yaml", seltest.Machine{Name: "dgx-h100"}, []string{
			`request "gpus" (2 of class gpu.nvidia.com): 8 of 8 devices usable`,
			"constraint #0 (matchAttribute resource.kubernetes.io/pcieRoot): no single value has enough usable devices",
			"gpus 1/2",
		}},
		{"23-cel-small-inference-gpu.yaml", seltest.Machine{Name: "l4x8"}, []string{
			"8 rejected by request selector #0",
			"cudaComputeCapability 8.9.0 ×8",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			r := checkFile(t, "../../examples/deploy/workloads/"+tc.file, tc.on)
			if r.OK() || len(r.Claims) != 1 || r.Claims[0].Allocated {
				t.Fatalf("report %+v: want one unschedulable claim", r.Claims)
			}
			got := strings.Join(r.Claims[0].Reasons, "\n")
			pos := 0
			for _, w := range tc.want {
				i := strings.Index(got[pos:], w)
				if i < 0 {
					t.Fatalf("reasons do not say %q (after position %d):\n%s", w, pos, got)
				}
				pos += i + len(w)
			}
		})
	}
}

// TestCheckGivesUpWithTheScheduler: a class selector that does not compile makes the scheduler
// fail the claim; the reason says so, and lint has the fix.
func TestCheckGivesUpWithTheScheduler(t *testing.T) {
	r := checkFile(t, "../testdata/seeds/003-gpu-large.yaml", seltest.Machine{Name: "dgx-a100-40gb"})
	if len(r.Claims) != 1 || r.Claims[0].Allocated || !strings.Contains(r.Claims[0].Reasons[0], "the scheduler gives up on this claim: claim ml-team/training-gpu: class gpu-large: selector #0: CEL compile error") {
		t.Fatalf("claims: %+v", r.Claims)
	}
	rules := map[string]bool{}
	for _, f := range r.Findings {
		rules[f.Rule] = true
	}
	for _, want := range []string{finding.RuleMissingExactly, finding.RuleNameAsDomain, finding.RuleCompile} {
		if !rules[want] {
			t.Errorf("no %s finding in %v", want, r.Findings)
		}
	}
}

// TestCheckSharesClaimsAndKeepsPodsOnOneNode: on two nodes with one GPU each, a pod's two
// claims must land on one node (so the pod does not fit on either), a claim shared by pods is
// allocated once, and a pod that uses it must fit on its node.
func TestCheckSharesClaimsAndKeepsPodsOnOneNode(t *testing.T) {
	one := func(node string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: gpudra.DefaultDriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				gpudra.AttrType: {StringValue: ptr.To("gpu")}}}}}}
	}
	manifest := `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu}
spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: two}
spec:
  containers: [{name: c, image: x}]
  resourceClaims: [{name: a, resourceClaimTemplateName: gpu}, {name: b, resourceClaimTemplateName: gpu}]
---
apiVersion: v1
kind: Pod
metadata: {name: mixed-1}
spec:
  containers: [{name: c, image: x}]
  resourceClaims: [{name: s, resourceClaimName: shared}, {name: own, resourceClaimTemplateName: gpu}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: users}
spec:
  replicas: 2
  selector: {matchLabels: {app: u}}
  template:
    metadata: {labels: {app: u}}
    spec:
      containers: [{name: c, image: x}]
      resourceClaims: [{name: s, resourceClaimName: shared}]
---
apiVersion: v1
kind: Pod
metadata: {name: mixed-2}
spec:
  containers: [{name: c, image: x}]
  resourceClaims: [{name: s, resourceClaimName: shared}, {name: own, resourceClaimTemplateName: gpu}]
`
	c := check.NewChecker(check.WithMachine("two nodes", []*resourceapi.ResourceSlice{one("node-a"), one("node-b")}))
	r, err := c.Check(context.Background(), "inline", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		Claim     string
		Allocated bool
		Node      string
		Pods      string
	}
	var got []res
	for _, cr := range r.Claims {
		got = append(got, res{cr.Claim, cr.Allocated, cr.Node, strings.Join(cr.Pods, ",")})
	}
	want := []res{
		// mixed-1 cannot have it (its own claim finds no second GPU on either node); users-0 can.
		{"default/shared", true, "node-a", "mixed-1,users-0,users-1,mixed-2"},
		{"default/gpu-1", false, "", "two"},
		{"default/gpu-2", false, "", "two"},
		{"default/gpu-3", false, "", "mixed-1"},
		// mixed-2 shares the claim on node-a, so its own claim must fit there too, and does not,
		// although node-b has a free GPU.
		{"default/gpu-4", false, "", "mixed-2"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	if len(r.Claims) != 5 {
		return
	}
	if r.Claims[0].Reasons != nil {
		t.Errorf("the allocated shared claim keeps the reasons of an earlier attempt: %v", r.Claims[0].Reasons)
	}
	// The pod comes first: on each node its first claim takes the GPU and the second finds none.
	if got := strings.Join(r.Claims[2].Reasons, "\n"); !strings.Contains(got, "node node-a: ") || !strings.Contains(got, "node node-b: ") {
		t.Errorf("reasons of the second claim do not cover both nodes: %v", r.Claims[2].Reasons)
	}
	if diff := cmp.Diff([]string{"not allocated: another claim of the same pod does not fit"}, r.Claims[1].Reasons); diff != "" {
		t.Errorf("reasons of the first claim (-want +got):\n%s", diff)
	}
}

// TestCheckWithoutAMachineOnlyLints: no machine, no allocation.
func TestCheckWithoutAMachineOnlyLints(t *testing.T) {
	data, err := os.ReadFile("../../examples/deploy/workloads/10-mig-invalid-profile.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := check.NewChecker().Check(context.Background(), "10", data)
	if err != nil {
		t.Fatal(err)
	}
	// 7g.80gb exists on some GPU model (A100-80GB, H100): no finding without a machine.
	if !r.OK() || r.Machine != "" || len(r.Claims) != 0 {
		t.Errorf("report = %+v", r)
	}
}
