package upgrade_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/manifest"
	"github.com/gpudra/gpudra/selectors/upgrade"
)

// globMatch is the v1alpha1 GlobProperty semantics, written independently: case-insensitive,
// "*" matches any run, everything else literally.
func globMatch(pattern, s string) bool {
	p, str := strings.ToLower(pattern), strings.ToLower(s)
	if p == "" {
		return str == ""
	}
	if p[0] == '*' {
		for i := 0; i <= len(str); i++ {
			if globMatch(p[1:], str[i:]) {
				return true
			}
		}
		return false
	}
	return str != "" && p[0] == str[0] && globMatch(p[1:], str[1:])
}

// versionCmp compares dotted versions numerically ("580.126.09" > "550.54.15").
func versionCmp(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < 3; i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}

// opHolds is the v1alpha1 comparator semantics for a comparison result.
func opHolds(op string, cmp int) bool {
	return map[string]bool{
		"Equals": cmp == 0, "LessThan": cmp < 0, "LessThanOrEqualTo": cmp <= 0,
		"GreaterThan": cmp > 0, "GreaterThanOrEqualTo": cmp >= 0,
	}[op]
}

// TestGpuClaimParametersFieldMapping converts every GpuSelectorProperties field and every
// comparator operator, and checks the CEL against the v1alpha1 semantics on the full GPUs of
// every test machine and on synthetic T4 and V100 GPUs.
func TestGpuClaimParametersFieldMapping(t *testing.T) {
	var gpus []*selectors.Device
	for _, m := range seltest.Machines() {
		for _, d := range m.Devices(t) {
			if seltest.StringAttr(d, gpudra.AttrType) == "gpu" {
				gpus = append(gpus, d)
			}
		}
	}
	gpus = append(gpus, seltest.SyntheticGPUs()...)
	uuid := seltest.StringAttr(gpus[0], gpudra.AttrUUID)
	idx := func(d *selectors.Device) int64 {
		a, _ := d.Attribute(gpudra.AttrIndex)
		return ptr.Deref(a.IntValue, -1)
	}
	type tc struct {
		name     string
		selector string // YAML of spec.selector
		want     func(d *selectors.Device) bool
	}
	cases := []tc{
		{"index", "index: 3", func(d *selectors.Device) bool { return idx(d) == 3 }},
		{"uuid", "uuid: " + uuid, func(d *selectors.Device) bool { return seltest.StringAttr(d, gpudra.AttrUUID) == uuid }},
		{"productName glob", `productName: "*A100*80GB"`, func(d *selectors.Device) bool {
			return globMatch("*a100*80gb", seltest.StringAttr(d, gpudra.AttrProductName))
		}},
		{"productName case", `productName: "*t4*"`, func(d *selectors.Device) bool {
			return globMatch("*t4*", seltest.StringAttr(d, gpudra.AttrProductName))
		}},
		{"productName exact", `productName: nvidia l4`, func(d *selectors.Device) bool {
			return globMatch("nvidia l4", seltest.StringAttr(d, gpudra.AttrProductName))
		}},
		{"brand", `brand: NVIDIA`, func(d *selectors.Device) bool { return globMatch("nvidia", seltest.StringAttr(d, gpudra.AttrBrand)) }},
		{"architecture", `architecture: "hop*"`, func(d *selectors.Device) bool {
			return globMatch("hop*", seltest.StringAttr(d, gpudra.AttrArchitecture))
		}},
		{"cudaDriverVersion", "cudaDriverVersion: {value: '12.4', operator: GreaterThanOrEqualTo}", func(d *selectors.Device) bool {
			return versionCmp(seltest.VersionAttr(d, gpudra.AttrCudaDriverVersion).String(), "12.4") >= 0
		}},
	}
	for _, op := range []string{"Equals", "LessThan", "LessThanOrEqualTo", "GreaterThan", "GreaterThanOrEqualTo"} {
		for _, q := range []string{"40Gi", "16G", "81559Mi"} {
			cases = append(cases, tc{"memory " + op + " " + q, "memory: {value: " + q + ", operator: " + op + "}", func(d *selectors.Device) bool {
				m := seltest.Memory(d)
				return opHolds(op, m.Cmp(resource.MustParse(q)))
			}})
		}
		for _, v := range []string{"8.0", "7.5", "9"} {
			cases = append(cases, tc{"cudaComputeCapability " + op + " " + v, "cudaComputeCapability: {value: " + v + ", operator: " + op + "}", func(d *selectors.Device) bool {
				return opHolds(op, versionCmp(seltest.VersionAttr(d, gpudra.AttrCudaComputeCapability).String(), v))
			}})
		}
		for _, v := range []string{"580.126.09", "550.54.15"} {
			cases = append(cases, tc{"driverVersion " + op + " " + v, "driverVersion: {value: '" + v + "', operator: " + op + "}", func(d *selectors.Device) bool {
				return opHolds(op, versionCmp(seltest.VersionAttr(d, gpudra.AttrDriverVersion).String(), v))
			}})
		}
	}
	cases = append(cases, tc{"seed 002 orExpression", `orExpression:
    - productName: "*t4*"
    - andExpression:
        - productName: "*v100*"
        - memory: {value: 16G, operator: LessThanOrEqualTo}`, func(d *selectors.Device) bool {
		m := seltest.Memory(d)
		return globMatch("*t4*", seltest.StringAttr(d, gpudra.AttrProductName)) ||
			globMatch("*v100*", seltest.StringAttr(d, gpudra.AttrProductName)) && m.Cmp(resource.MustParse("16G")) <= 0
	}})

	u := upgrade.NewUpgrader("")
	c := selectors.NewCompiler()
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expr := convertSelector(t, u, tc.selector)
			sel, err := c.Compile(expr)
			if err != nil {
				t.Fatalf("%s: %v", expr, err)
			}
			matched := 0
			for _, d := range gpus {
				got, err := sel.Matches(ctx, d)
				if err != nil {
					t.Fatalf("%s on %s: %v", expr, d.Name(), err)
				}
				if want := tc.want(d); got != want {
					t.Errorf("%s on %s (%s): got %v, want %v", expr, d.Name(), seltest.StringAttr(d, gpudra.AttrProductName), got, want)
				}
				if got {
					matched++
				}
			}
			if matched == 0 && !strings.Contains(tc.name, "Equals") && !strings.HasPrefix(tc.name, "cudaComputeCapability LessThan") {
				t.Logf("%s matches no GPU", tc.name)
			}
		})
	}
}

// convertSelector upgrades a claim whose GpuClaimParameters has the given selector and returns
// the CEL expression.
func convertSelector(t *testing.T, u *upgrade.Upgrader, selector string) string {
	t.Helper()
	doc := `apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {name: c}
spec:
  resourceClassName: gpu.nvidia.com
  parametersRef: {apiGroup: gpu.resource.nvidia.com, kind: GpuClaimParameters, name: p}
---
apiVersion: gpu.resource.nvidia.com/v1alpha1
kind: GpuClaimParameters
metadata: {name: p}
spec:
  selector:
    ` + selector + "\n"
	up, err := u.Upgrade([]byte(doc))
	if err != nil {
		t.Fatalf("Upgrade: %v", err)
	}
	objs, err := manifest.Decode(up.Manifest)
	if err != nil || len(objs) != 1 {
		t.Fatalf("decode: %v %v", objs, err)
	}
	claim := objs[0].Object.(*resourceapi.ResourceClaim)
	return claim.Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression
}

// TestGpuClaimParametersRejects: fields without a v1 equivalent and malformed values.
func TestGpuClaimParametersRejects(t *testing.T) {
	cases := []struct{ spec, want string }{
		{"selector: {migEnabled: true}", "spec.selector.migEnabled: no equivalent"},
		{"selector: {memory: {value: 16G, operator: About}}", "spec.selector.memory.operator: unsupported value About"},
		{"selector: {memory: {value: lots, operator: Equals}}", "spec.selector.memory.value: lots is not a quantity"},
		{"selector: {driverVersion: {value: new, operator: Equals}}", `spec.selector.driverVersion.value: version "new"`},
		{"selector: {andExpression: []}", "spec.selector.andExpression: must be a non-empty list"},
		{"selector: {index: one}", "spec.selector.index: must be an integer"},
		{"count: 0.5", "spec.count: must be a whole number"},
		{"count: 2\nfoo: bar", "spec.foo: unknown field"},
	}
	u := upgrade.NewUpgrader("")
	for _, tc := range cases {
		doc := `apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {name: c}
spec:
  resourceClassName: gpu.nvidia.com
  parametersRef: {apiGroup: gpu.resource.nvidia.com, kind: GpuClaimParameters, name: p}
---
apiVersion: gpu.resource.nvidia.com/v1alpha1
kind: GpuClaimParameters
metadata: {name: p}
spec:
  ` + strings.ReplaceAll(tc.spec, "\n", "\n  ") + "\n"
		_, err := u.Upgrade([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), "GpuClaimParameters p: "+tc.want) {
			t.Errorf("%s: error = %v, want %q", tc.spec, err, tc.want)
		}
	}
}

// TestMigClaimParameters: profile becomes a selector and the class mig.nvidia.com; sharing
// becomes a MigDeviceConfig; gpuClaimName has no equivalent.
func TestMigClaimParameters(t *testing.T) {
	doc := func(spec string) string {
		return `apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {name: c}
spec:
  resourceClassName: gpu.nvidia.com
  parametersRef: {apiGroup: gpu.resource.nvidia.com, kind: MigDeviceClaimParameters, name: p}
---
apiVersion: gpu.resource.nvidia.com/v1alpha1
kind: MigDeviceClaimParameters
metadata: {name: p}
spec: ` + spec + "\n"
	}
	up, err := upgrade.NewUpgrader("").Upgrade([]byte(doc("{profile: 2g.20gb, sharing: {strategy: MPS}}")))
	if err != nil {
		t.Fatal(err)
	}
	objs, _ := manifest.Decode(up.Manifest)
	claim := objs[0].Object.(*resourceapi.ResourceClaim)
	req := claim.Spec.Devices.Requests[0]
	if req.Exactly.DeviceClassName != "mig.nvidia.com" || req.Exactly.Selectors[0].CEL.Expression != "device.attributes['gpu.nvidia.com'].profile == '2g.20gb'" {
		t.Errorf("request = %+v", req.Exactly)
	}
	if p := string(claim.Spec.Devices.Config[0].Opaque.Parameters.Raw); !strings.Contains(p, `"kind":"MigDeviceConfig"`) || !strings.Contains(p, `"strategy":"MPS"`) {
		t.Errorf("config = %s", p)
	}
	for spec, want := range map[string]string{
		"{profile: 2g.20gb, gpuClaimName: g}": "spec.gpuClaimName: no v1 equivalent",
		"{profile: 2g20gb}":                   "spec.profile:",
	} {
		if _, err := upgrade.NewUpgrader("").Upgrade([]byte(doc(spec))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error = %v, want %q", spec, err, want)
		}
	}
}
