package upgrade_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/selectors/upgrade"
	"github.com/gpudra/gpudra/sharing/v1beta1"
	"github.com/gpudra/gpudra/simulate"
)

// allocation is the outcome of allocating a manifest's claims in order.
type allocation struct {
	claims  []*resourceapi.ResourceClaim // allocated claims
	pods    []simulate.Pod
	unsched int // claims that did not fit
}

// allocateManifest hands an upgraded manifest to the scheduler's allocator (through
// simulate) on a fake machine. Any error other than "does not fit" fails the test: the
// allocator must accept the manifest.
func allocateManifest(t *testing.T, manifest []byte, m seltest.Machine) allocation {
	t.Helper()
	w, err := simulate.LoadWorkload(manifest, nil, simulate.SkipOtherKinds())
	if err != nil {
		t.Fatalf("LoadWorkload: %v\n%s", err, manifest)
	}
	sim := simulate.New(seltest.Node, append(selectors.DeviceClasses(""), w.Classes...), m.Slices(t))
	out := allocation{pods: w.Pods}
	claims := append(w.Claims, unusedTemplates(t, manifest, w)...)
	for _, c := range claims {
		got, err := sim.Allocate(context.Background(), c)
		switch {
		case errors.Is(err, simulate.ErrUnschedulable):
			out.unsched++
		case err != nil:
			t.Fatalf("the allocator rejects claim %s: %v\n%s", c.Name, err, manifest)
		default:
			out.claims = append(out.claims, got)
		}
	}
	return out
}

// unusedTemplates are claims made from the templates no pod uses, so that the allocator judges
// templates that the seeds show without a pod.
func unusedTemplates(t *testing.T, data []byte, w *simulate.Workload) []*resourceapi.ResourceClaim {
	t.Helper()
	objs, err := manifest.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, c := range w.Claims {
		used[strings.TrimRight(strings.TrimRight(c.Name, "0123456789"), "-")] = true
	}
	var out []*resourceapi.ResourceClaim
	for _, o := range objs {
		if tpl, ok := o.Object.(*resourceapi.ResourceClaimTemplate); ok && !used[tpl.Name] {
			c := &resourceapi.ResourceClaim{Spec: *tpl.Spec.Spec.DeepCopy()}
			c.Name, c.Namespace, c.UID = tpl.Name, "default", simulate.SequentialUID(100+len(out))
			out = append(out, c)
		}
	}
	return out
}

func devices(a allocation) []string {
	var out []string
	for _, c := range a.claims {
		for _, r := range c.Status.Allocation.Devices.Results {
			out = append(out, r.Device)
		}
	}
	return out
}

// opaque decodes the driver's opaque configuration of the first claim.
func opaque(t *testing.T, a allocation) v1beta1.Config {
	t.Helper()
	if len(a.claims) == 0 || len(a.claims[0].Spec.Devices.Config) == 0 {
		t.Fatal("no config in the upgraded claim")
	}
	cfg, err := v1beta1.NewDecoder().DecodeRaw(a.claims[0].Spec.Devices.Config[0].Opaque.Parameters)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var (
	a100    = seltest.Machine{Name: "dgx-a100-40gb"}
	a100Mig = seltest.Machine{Name: "dgx-a100-40gb", MOpts: []gputest.Option{seltest.Balanced40}}
	// a100VFIO publishes every GPU for passthrough too.
	a100VFIO = seltest.Machine{Name: "dgx-a100-40gb", BOpts: []gpudra.Option{gpudra.WithPassthrough(func(g *gpu.GPU) (int, bool) { return 40 + g.Minor, true })}}
	a100_80  = seltest.Machine{Name: "dgx-a100-80gb", MOpts: []gputest.Option{seltest.Balanced80}}
)

// TestSeedManifestsUpgrade is the acceptance test of the upgrade: every seed manifest either
// converts to v1 objects that the scheduler's allocator accepts (and allocates what the seed
// meant), or fails with errors that name the object, the field and why.
func TestSeedManifestsUpgrade(t *testing.T) {
	cases := []struct {
		file string
		// wantErrs are substrings of the errors, each "Object: field: reason" in part.
		wantErrs []string
		on       seltest.Machine
		check    func(t *testing.T, a allocation)
	}{
		{file: "000-basic.yaml", on: a100, check: wantDevices(1)},
		{file: "000-timeslicing.yaml", on: a100},
		{file: "000-mps.yaml", on: a100},
		{file: "000-mig.yaml", on: a100_80},
		{file: "001-claims.yaml", on: a100Mig, check: wantDevices(2)}, // the claim and the template: one 1g.5gb each
		{file: "002-unique-gpu.yaml", on: a100, check: func(t *testing.T, a allocation) {
			// Two claims from one template in one pod: two different GPUs.
			if d := devices(a); len(d) != 2 || d[0] == d[1] || len(a.pods) != 1 || len(a.pods[0].Claims) != 2 {
				t.Errorf("devices %v, pods %+v; want two different GPUs for one pod", d, a.pods)
			}
		}},
		{file: "002-unique-gpu-resourcename.yaml", wantErrs: []string{"ResourceClaimTemplate unique-gpu: spec.spec.resourceName: unknown field", "did you mean resourceClassName?"}},
		{file: "002-shared-gpu.yaml", on: a100, check: func(t *testing.T, a allocation) {
			if d := devices(a); len(d) != 1 || len(a.pods) != 2 || a.pods[0].Claims[0] != a.pods[1].Claims[0] {
				t.Errorf("devices %v, pods %+v; want one GPU shared by two pods", d, a.pods)
			}
		}},
		{file: "002-shared-gpu-nested.yaml", wantErrs: []string{"ResourceClaim shared-gpu: spec.spec: a ResourceClaim's spec holds resourceClassName"}},
		{file: "002-ctr0-ctr1.yaml", on: a100, check: func(t *testing.T, a allocation) {
			// The pod names the template as a claim: nothing to allocate, the claim is missing.
			if len(a.pods) != 1 || len(a.pods[0].MissingClaims) != 1 {
				t.Errorf("pods %+v, want the claim unique-gpu missing", a.pods)
			}
		}},
		{file: "002-single-gpu-params.yaml", wantErrs: []string{"ResourceClaimTemplate unique-gpu: spec.resourceClassName: a ResourceClaimTemplate holds the claim spec under spec.spec"}},
		{file: "002-two-gpus.yaml", wantErrs: []string{"ResourceClaimTemplate two-unique-gpus: spec.spec.resourceName: unknown field"}},
		{file: "002-two-gpus-fixed.yaml", on: a100, check: wantDevices(2)},
		{file: "002-mps.yaml", on: a100, check: wantStrategy(v1beta1.StrategyMPS)},
		{file: "002-mps-config-placeholders.yaml", wantErrs: []string{"GpuClaimParameters single-gpu: spec.sharing:", `"<quantity>"`}},
		{file: "002-mps-config.yaml", wantErrs: []string{"GpuClaimParameters single-gpu: spec.sharing:", "spec.sharing.mpsConfig.maxConnections: Forbidden"}},
		{file: "002-mps-config-no-maxconnections.yaml", on: a100, check: func(t *testing.T, a allocation) {
			mps := opaque(t, a).MPS()
			if mps == nil || ptr.Deref(mps.DefaultActiveThreadPercentage, 0) != 50 || mps.DefaultPinnedDeviceMemoryLimit.String() != "10Gi" {
				t.Errorf("MPS config = %+v, want 50%% and 10Gi", mps)
			}
		}},
		{file: "002-timeslicing-placeholder.yaml", wantErrs: []string{"GpuClaimParameters single-gpu: spec.sharing:", "<Default|Short|Medium|Long>"}},
		{file: "002-timeslicing.yaml", on: a100, check: func(t *testing.T, a allocation) {
			if got := opaque(t, a).(*v1beta1.GpuConfig).Interval(); got != v1beta1.LongTimeSlice {
				t.Errorf("interval = %s, want Long", got)
			}
		}},
		// No T4 or V100 among the fake machines: accepted, and does not fit.
		{file: "002-selector-or.yaml", on: a100, check: wantUnschedulable},
		{file: "002-inference-gpu.yaml", on: a100, check: wantUnschedulable},
		{file: "002-mig.yaml", on: a100Mig, check: func(t *testing.T, a allocation) {
			if d := devices(a); len(d) != 1 || !strings.Contains(d[0], "-mig-1g5gb-") {
				t.Errorf("devices %v, want one 1g.5gb MIG device", d)
			}
		}},
		{file: "002-vfio.yaml", on: a100VFIO, check: func(t *testing.T, a allocation) {
			if d := devices(a); len(d) != 1 || !strings.HasSuffix(d[0], "-vfio") {
				t.Errorf("devices %v, want one vfio device", d)
			}
		}},
		{file: "003-gpu-large.yaml"}, // converts; its DeviceClass selector does not compile (lint's job)
		{file: "004-gpuclaimparameters.yaml", wantErrs: []string{
			"GpuClaimParameters my-params: spec.selector: a selector has exactly one property, got memory, model",
			"GpuClaimParameters my-params: spec.selector.model: unknown selector property",
			"did you mean productName?",
			"GpuClaimParameters my-params: spec.selector.memory: must be a comparator",
			"GpuClaimParameters my-params: spec.sharing.strategy: MIG is not a sharing strategy",
		}},
	}
	u := upgrade.NewUpgrader("")
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile("../testdata/seeds/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			up, err := u.Upgrade(data)
			if up == nil {
				t.Fatalf("Upgrade: %v", err)
			}
			if tc.wantErrs == nil && err != nil {
				t.Fatalf("Upgrade: %v", err)
			}
			for _, want := range tc.wantErrs {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v\ndoes not say %q", err, want)
				}
			}
			var ue *upgrade.UpgradeError
			if tc.wantErrs != nil && !errors.As(err, &ue) {
				t.Errorf("error %v is not an *UpgradeError", err)
			}
			if tc.wantErrs == nil && !strings.HasPrefix(tc.file, "001") && !up.Changed() {
				t.Errorf("no changes recorded")
			}
			if tc.wantErrs != nil || tc.on.Name == "" {
				return
			}
			// What was converted is v1 that decodes strictly and that the allocator accepts.
			if _, err := manifest.Decode(up.Manifest); err != nil {
				t.Fatalf("upgraded manifest does not decode: %v\n%s", err, up.Manifest)
			}
			a := allocateManifest(t, up.Manifest, tc.on)
			if tc.check != nil {
				tc.check(t, a)
			}
		})
	}
}

func wantDevices(n int) func(t *testing.T, a allocation) {
	return func(t *testing.T, a allocation) {
		t.Helper()
		if d := devices(a); len(d) != n || a.unsched != 0 {
			t.Errorf("devices %v (%d unschedulable), want %d", d, a.unsched, n)
		}
	}
}

func wantStrategy(s v1beta1.SharingStrategy) func(t *testing.T, a allocation) {
	return func(t *testing.T, a allocation) {
		t.Helper()
		if got := opaque(t, a).Strategy(); got != s {
			t.Errorf("strategy = %s, want %s", got, s)
		}
	}
}

func wantUnschedulable(t *testing.T, a allocation) {
	t.Helper()
	if a.unsched != 1 || len(a.claims) != 0 {
		t.Errorf("%d allocated, %d unschedulable; want the one claim unschedulable", len(a.claims), a.unsched)
	}
}

// TestUpgradeKeepsV1 leaves manifests that need nothing byte for byte, comments included.
func TestUpgradeKeepsV1(t *testing.T) {
	u := upgrade.NewUpgrader("")
	for _, f := range seltest.SeedFiles(t) {
		if !strings.Contains(f, "examples/deploy") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		up, err := u.Upgrade(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if up.Changed() || string(up.Manifest) != string(data) {
			t.Errorf("%s changed: %v", f, up.Changes)
		}
	}
}

// TestUpgradeIsIdempotent: upgrading an upgraded manifest changes nothing.
func TestUpgradeIsIdempotent(t *testing.T) {
	u := upgrade.NewUpgrader("")
	for _, f := range seltest.SeedFiles(t) {
		data, _ := os.ReadFile(f)
		once, _ := u.Upgrade(data)
		twice, err := u.Upgrade(once.Manifest)
		if twice == nil {
			t.Fatalf("%s: %v", f, err)
		}
		if diff := cmp.Diff(string(once.Manifest), string(twice.Manifest)); diff != "" {
			t.Errorf("%s: second upgrade changed the manifest (-once +twice):\n%s", f, diff)
		}
	}
}

// TestUpgradeBetaVersions converts v1beta1 and v1beta2 objects of every kind; the expected v1
// objects are written by hand from the v1 API's field layout.
func TestUpgradeBetaVersions(t *testing.T) {
	yaml := `apiVersion: resource.k8s.io/v1beta1
kind: DeviceClass
metadata: {name: big}
spec:
  selectors: [{cel: {expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}}]
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: pair, namespace: ml}
spec:
  devices:
    requests:
    - name: gpus
      deviceClassName: big
      allocationMode: ExactCount
      count: 2
      selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].architecture == 'Ampere'"}}]
    - name: any
      firstAvailable:
      - {name: whole, deviceClassName: gpu.nvidia.com}
      - {name: slice, deviceClassName: mig.nvidia.com}
    constraints: [{requests: [gpus], matchAttribute: resource.kubernetes.io/pcieRoot}]
---
apiVersion: resource.k8s.io/v1beta2
kind: ResourceClaimTemplate
metadata: {name: one}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All}
`
	up, err := upgrade.NewUpgrader("").Upgrade([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(up.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	attr := resourceapi.FullyQualifiedName("resource.kubernetes.io/pcieRoot")
	want := []any{
		&resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}}}}},
		&resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{
				{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "big", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2,
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].architecture == 'Ampere'"}}}}},
				{Name: "any", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "whole", DeviceClassName: "gpu.nvidia.com"}, {Name: "slice", DeviceClassName: "mig.nvidia.com"}}},
			},
			Constraints: []resourceapi.DeviceConstraint{{Requests: []string{"gpus"}, MatchAttribute: &attr}},
		}},
		&resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeAll}}}}},
	}
	if len(objs) != 3 {
		t.Fatalf("objects: %v", objs)
	}
	got := []any{
		&resourceapi.DeviceClass{Spec: objs[0].Object.(*resourceapi.DeviceClass).Spec},
		&objs[1].Object.(*resourceapi.ResourceClaim).Spec,
		&objs[2].Object.(*resourceapi.ResourceClaimTemplate).Spec.Spec,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("converted specs (-want +got):\n%s", diff)
	}
	if objs[1].Namespace != "ml" || objs[1].APIVersion != "resource.k8s.io/v1" {
		t.Errorf("claim %s in %s", objs[1], objs[1].APIVersion)
	}
}

// TestUpgradeResourceClasses: the driver's own classes are dropped (it ships them); others
// become DeviceClasses selecting the driver's devices; what has no equivalent is an error.
func TestUpgradeResourceClasses(t *testing.T) {
	yaml := `apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClass
metadata: {name: gpu.nvidia.com}
driverName: gpu.resource.nvidia.com
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClass
metadata: {name: team-gpus}
driverName: gpu.resource.nvidia.com
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClass
metadata: {name: picky}
driverName: gpu.resource.nvidia.com
suitableNodes: {nodeSelectorTerms: [{matchExpressions: [{key: gpu, operator: Exists}]}]}
`
	up, err := upgrade.NewUpgrader("").Upgrade([]byte(yaml))
	if err == nil || !strings.Contains(err.Error(), "ResourceClass picky: suitableNodes: no v1 equivalent") {
		t.Errorf("error = %v, want suitableNodes rejected", err)
	}
	objs, derr := manifest.Decode(up.Manifest)
	if derr != nil {
		t.Fatal(derr)
	}
	var classes []string
	for _, o := range objs {
		if dc, ok := o.Object.(*resourceapi.DeviceClass); ok {
			classes = append(classes, dc.Name+": "+dc.Spec.Selectors[0].CEL.Expression)
		}
	}
	want := []string{"team-gpus: device.driver == '" + gpudra.DefaultDriverName + "'"}
	if diff := cmp.Diff(want, classes); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
}

// TestUpgradePodSources moves resourceClaims[].source up in every kind with a pod template.
func TestUpgradePodSources(t *testing.T) {
	yaml := `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: x, resources: {claims: [{name: gpu}]}}]
      resourceClaims:
      - name: gpu
        source: {resourceClaimTemplateName: one}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "@daily"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: x}]
          resourceClaims: [{name: gpu, source: {resourceClaimName: shared}}]
`
	up, err := upgrade.NewUpgrader("").Upgrade([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(up.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || len(up.Changes) != 2 {
		t.Fatalf("objects %v, changes %v", objs, up.Changes)
	}
	for _, want := range []string{"resourceClaimTemplateName: one", "resourceClaimName: shared"} {
		if !strings.Contains(string(up.Manifest), want) || strings.Contains(string(up.Manifest), "source:") {
			t.Errorf("upgraded manifest lacks %q or keeps source:\n%s", want, up.Manifest)
		}
	}
}
