package deviceplugin_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/deviceplugin"
)

// Selectors and configs written out by hand from the compatibility contract (DESIGN.md), not
// from the builders.
const (
	gpuExpr     = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
	migExpr     = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
	gpuOrMIG    = "(" + gpuExpr + ") || (" + migExpr + ")"
	tsGPU       = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`
	tsMIG       = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`
	mpsTenth    = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":10}}}`
	mpsQuarter  = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":25}}}`
	profileExpr = migExpr + " && device.attributes['gpu.nvidia.com'].profile == '%s'"
)

// class is what a test expects of one converted DeviceClass.
type class struct {
	Name, Resource, Expr string
	Configs              []string
}

func migClass(profile, resource string, configs ...string) class {
	return class{Name: strings.TrimPrefix(resource, "nvidia.com/") + ".extended.nvidia.com", Resource: resource,
		Expr: strings.Replace(profileExpr, "%s", profile, 1), Configs: configs}
}

// summarize reduces classes to what the tests compare; configs are compared as JSON values.
func summarize(t *testing.T, classes []*resourceapi.DeviceClass) []class {
	t.Helper()
	var out []class
	for _, c := range classes {
		s := class{Name: c.Name, Expr: c.Spec.Selectors[0].CEL.Expression}
		if c.Spec.ExtendedResourceName != nil {
			s.Resource = *c.Spec.ExtendedResourceName
		}
		for _, cfg := range c.Spec.Config {
			if cfg.Opaque.Driver != "gpu.nvidia.com" {
				t.Errorf("class %s: config for driver %q", c.Name, cfg.Opaque.Driver)
			}
			s.Configs = append(s.Configs, canonicalJSON(t, cfg.Opaque.Parameters.Raw))
		}
		out = append(out, s)
	}
	return out
}

func canonicalJSON(t *testing.T, data []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("config %s: %v", data, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// TestConvertDocumentedConfigs converts the configs of NVIDIA's device plugin README and GPU
// operator time-slicing guide. want says, per extended resource the device plugin advertises
// under the config, the class that serves it; differences are substrings that Differences must
// contain, in order.
func TestConvertDocumentedConfigs(t *testing.T) {
	cases := []struct {
		name        string
		config      string
		opts        []deviceplugin.Option
		want        []class
		differences []string
	}{{
		name: "README configuration file",
		config: `version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: "envvar"
    deviceIDStrategy: "uuid"`,
		want: []class{{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuExpr}},
	}, {
		name:   "empty file: migStrategy none",
		config: `version: v1`,
		want:   []class{{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuExpr}},
	}, {
		name: "README time-slicing, 10 replicas",
		config: `version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 10`,
		want:        []class{{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuExpr, Configs: []string{tsGPU}}},
		differences: []string{"replicas: 10 let 10 pods share each device", "10 times fewer", "several replicas"},
	}, {
		name: "README time-slicing, renameByDefault",
		config: `version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10`,
		want:        []class{{Name: "gpu.shared.extended.nvidia.com", Resource: "nvidia.com/gpu.shared", Expr: gpuExpr, Configs: []string{tsGPU}}},
		differences: []string{"replicas: 10"},
	}, {
		name: "README MPS, 10 replicas",
		config: `version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 10`,
		want:        []class{{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuExpr, Configs: []string{mpsTenth}}},
		differences: []string{"replicas: 10", "at most 10% of the multiprocessors", "defaultPinnedDeviceMemoryLimit"},
	}, {
		name: "README MPS, renameByDefault",
		config: `version: v1
sharing:
  mps:
    renameByDefault: true
    resources:
    - name: gpu
      replicas: 4`,
		want:        []class{{Name: "gpu.shared.extended.nvidia.com", Resource: "nvidia.com/gpu.shared", Expr: gpuExpr, Configs: []string{mpsQuarter}}},
		differences: []string{"replicas: 4", "at most 25%"},
	}, {
		name: "GPU operator guide: tesla-t4",
		config: `version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4`,
		want:        []class{{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuExpr, Configs: []string{tsGPU}}},
		differences: []string{"replicas: 4", "several replicas"},
	}, {
		name: "GPU operator guide: a100-40gb, migStrategy mixed",
		config: `version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 8
    - name: nvidia.com/mig-1g.5gb
      replicas: 2
    - name: nvidia.com/mig-2g.10gb
      replicas: 2
    - name: nvidia.com/mig-3g.20gb
      replicas: 3
    - name: nvidia.com/mig-7g.40gb
      replicas: 7`,
		opts: []deviceplugin.Option{deviceplugin.WithMIGProfiles("1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")},
		want: []class{
			{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuExpr, Configs: []string{tsGPU}},
			migClass("1g.5gb", "nvidia.com/mig-1g.5gb", tsMIG),
			migClass("1g.5gb+me", "nvidia.com/mig-1g.5gb.me"),
			migClass("2g.10gb", "nvidia.com/mig-2g.10gb", tsMIG),
			migClass("3g.20gb", "nvidia.com/mig-3g.20gb", tsMIG),
			migClass("4g.20gb", "nvidia.com/mig-4g.20gb"),
			migClass("7g.40gb", "nvidia.com/mig-7g.40gb", tsMIG),
		},
		differences: []string{"replicas: 8", "several", "mig-1g.5gb", "replicas: 2", "mig-2g.10gb", "mig-3g.20gb", "mig-7g.40gb", "replicas: 7"},
	}, {
		name: "migStrategy single: MIG devices are nvidia.com/gpu too",
		config: `version: v1
flags:
  migStrategy: single
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 2`,
		want:        []class{{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuOrMIG, Configs: []string{tsGPU, tsMIG}}},
		differences: []string{"replicas: 2"},
	}, {
		name: "migStrategy single with MPS: MIG devices stay exclusive",
		config: `version: v1
flags:
  migStrategy: single
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 10`,
		want:        []class{{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuOrMIG, Configs: []string{mpsTenth}}},
		differences: []string{"replicas: 10", "10%", "MIG devices get no MPS"},
	}, {
		name: "what the device plugin ignores: rename, devices, timeSlicing beside mps, unknown resources",
		config: `version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
  mps:
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      rename: my-gpu
      devices: [0, 1]
      replicas: 4
    - name: nvidia.com/mig-1g.10gb
      replicas: 2`,
		want: []class{{Name: "gpu.extended.nvidia.com", Resource: "nvidia.com/gpu", Expr: gpuExpr, Configs: []string{mpsQuarter}}},
		differences: []string{"sharing.timeSlicing is ignored", `rename "my-gpu" is ignored`, "devices [0,1] is ignored",
			"replicas: 4", "25%", "several replicas", "mig-1g.10gb", "advertises no such resource"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := deviceplugin.Parse([]byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			res, err := deviceplugin.Convert(cfg, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			for i := range want {
				for j := range want[i].Configs {
					want[i].Configs[j] = canonicalJSON(t, []byte(want[i].Configs[j]))
				}
			}
			if diff := cmp.Diff(want, summarize(t, res.Classes)); diff != "" {
				t.Errorf("classes (-want +got):\n%s", diff)
			}
			all := strings.Join(res.Differences, "\n")
			rest := all
			for _, d := range tc.differences {
				i := strings.Index(rest, d)
				if i < 0 {
					t.Errorf("differences lack %q (in order) in:\n%s", d, all)
					break
				}
				rest = rest[i+len(d):]
			}
			if len(tc.differences) == 0 && len(res.Differences) > 0 {
				t.Errorf("differences %q, want none", res.Differences)
			}
		})
	}
}

// TestConvertMixedDefaultProfiles: without WithMIGProfiles, mixed gets a class for the profiles
// of every MIG-capable GPU, named as the device plugin names them.
func TestConvertMixedDefaultProfiles(t *testing.T) {
	res, err := deviceplugin.Convert(&deviceplugin.Config{Flags: deviceplugin.Flags{MigStrategy: new(deviceplugin.MigStrategyMixed)}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range res.Classes {
		got[*c.Spec.ExtendedResourceName] = c.Name
	}
	// Profiles of A100-40GB, H100 80GB, A30 and B200 as nvidia-smi mig -lgip lists them.
	for _, want := range []string{"nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.me",
		"nvidia.com/mig-3g.40gb", "nvidia.com/mig-7g.80gb", "nvidia.com/mig-2g.12gb.me", "nvidia.com/mig-1g.23gb"} {
		if got[want] == "" {
			t.Errorf("no class serves %s (classes: %v)", want, got)
		}
	}
	if got["nvidia.com/mig-1g.10gb.me"] != "mig-1g.10gb.me.extended.nvidia.com" {
		t.Errorf("class of nvidia.com/mig-1g.10gb.me: %q", got["nvidia.com/mig-1g.10gb.me"])
	}
}

func TestConvertOtherDriver(t *testing.T) {
	res, err := deviceplugin.Convert(&deviceplugin.Config{}, deviceplugin.WithDriverName("gpu.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	c := res.Classes[0]
	if c.Name != "gpu.extended.gpu.example.com" || c.Spec.Selectors[0].CEL.Expression != "device.driver == 'gpu.example.com' && device.attributes['gpu.example.com'].type == 'gpu'" {
		t.Errorf("class %s selects %q", c.Name, c.Spec.Selectors[0].CEL.Expression)
	}
}

// TestParseRejects: what the device plugin refuses at start is an error naming the field.
func TestParseRejects(t *testing.T) {
	cases := []struct{ name, config, want string }{
		{"version", "version: v2", `version: Unsupported value: "v2"`},
		{"MIG strategy", "flags:\n  migStrategy: all", `flags.migStrategy: Unsupported value: "all": supported values: "none", "single", "mixed"`},
		{"one replica", "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1", "sharing.timeSlicing.resources[0].replicas: Invalid value: 1: must be at least 2"},
		{"no resources", "sharing:\n  mps:\n    renameByDefault: true", "sharing.mps.resources: Required value"},
		{"MPS with mixed", "flags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 2", "sharing.mps: Forbidden: the device plugin does not support MPS with migStrategy mixed"},
		{"bad name", "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/GPU\n      replicas: 2", `sharing.timeSlicing.resources[0].name: Invalid value: "nvidia.com/GPU"`},
		{"long name", "sharing:\n  timeSlicing:\n    resources:\n    - name: " + strings.Repeat("g", 60) + "\n      replicas: 2", "at most 63 characters"},
		{"not YAML", "sharing: [", "device plugin config: error converting YAML to JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := deviceplugin.Parse([]byte(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := deviceplugin.Convert(nil); err == nil {
		t.Error("Convert(nil) succeeded")
	}
	// Convert checks a config built in code as Parse checks a file.
	bad := &deviceplugin.Config{Sharing: deviceplugin.Sharing{TimeSlicing: &deviceplugin.ReplicatedResources{
		Resources: []deviceplugin.ReplicatedResource{{Name: "gpu", Replicas: 0}}}}}
	if _, err := deviceplugin.Convert(bad); err == nil || !strings.Contains(err.Error(), "must be at least 2") {
		t.Errorf("Convert with 0 replicas: %v", err)
	}
}

func TestMIGResourceName(t *testing.T) {
	cases := []struct{ profile, want, err string }{
		{profile: "1g.10gb", want: "nvidia.com/mig-1g.10gb"},
		{profile: "1g.10gb+me", want: "nvidia.com/mig-1g.10gb.me"},
		{profile: "1g.24gb+me.all", want: "nvidia.com/mig-1g.24gb.me.all"},
		{profile: "1g.24gb-me", want: "nvidia.com/mig-1g.24gb-me"},
		{profile: "1c.3g.20gb", err: "compute-instance profile"},
		{profile: "3g", err: "3g"},
	}
	for _, tc := range cases {
		got, err := deviceplugin.MIGResourceName(tc.profile)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %q, %v; want an error containing %q", tc.profile, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.profile, got, err, tc.want)
		}
	}
}
