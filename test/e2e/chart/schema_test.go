package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/test/e2e/framework"
)

// usedValues are the value sets the repository's tests install the chart with (test/e2e
// chartValueSets and installChart, test/e2e/node chartValues and reinstall), plus the chart's
// own choices: the schema must accept every one.
var usedValues = map[string]map[string]any{
	"defaults":               nil,
	"dynamic-mig":            {"dynamicMIG": true, "nvidiaDriverRoot": "/run/nvidia/driver"},
	"consumable":             {"consumableMemory": true, "sharingStrategies": []any{"MPS"}},
	"consumable-without-mps": {"consumableMemory": true, "sharingStrategies": []any{}},
	"exclusive":              {"sharingStrategies": []any{}, "kubeletDir": "/var/lib/k0s/kubelet", "nodeSelector": map[string]any{"gpu": "yes"}},
	"fake-machine":           {"fakeMachine": map[string]any{"name": "l4x8"}},
	"extended-res":           {"extendedResources": map[string]any{"enabled": true, "migProfiles": []any{"1g.10gb", "1g.10gb+me"}}},
	"e2e-suite":              {"fakeMachine": map[string]any{"name": "dgx-a100-40gb"}, "mpsDaemonPods": false},
	"strategies":             {"fakeMachine": map[string]any{"name": "l4x8"}, "sharingStrategies": []any{"MPS"}, "mpsDaemonPods": false},
	"node-tier":              nodeValues(nil),
	"node-dynamic":           nodeValues(map[string]any{"dynamicMIG": true}),
	"node-extres":            nodeValues(map[string]any{"extendedResources": map[string]any{"enabled": true}}),
	"node-static-mig": nodeValues(map[string]any{"fakeMachine": map[string]any{
		"name": "dgx-a100-40gb", "driverRoot": "/tmp/node-e2e/driver", "migConfig": "all-balanced"}}),
	"node-glibc":          nodeValues(map[string]any{"nvidiaDriverRoot": "/tmp/node-e2e/glibc-root", "fakeMachine": map[string]any{"name": ""}}),
	"claim-status-true":   {"rbac": map[string]any{"claimStatus": true}},
	"claim-status-false":  {"rbac": map[string]any{"claimStatus": false}},
	"claim-status-auto":   {"rbac": map[string]any{"claimStatus": "auto"}},
	"everything-set-once": everyValue(),
}

// nodeValues are test/e2e/node's chartValues(extra).
func nodeValues(extra map[string]any) map[string]any {
	v := map[string]any{
		"kubeletDir":   "/tmp/node-e2e/kubelet",
		"cdiRoot":      "/tmp/node-e2e/cdi",
		"image":        map[string]any{"tag": "node-e2e"},
		"fakeMachine":  map[string]any{"name": "dgx-a100-40gb", "driverRoot": "/tmp/node-e2e/driver"},
		"logVerbosity": 4,
	}
	for k, x := range extra {
		v[k] = x
	}
	return v
}

// everyValue sets every value of values.yaml to something other than its default.
func everyValue() map[string]any {
	return map[string]any{
		"image":             map[string]any{"repository": "registry.example.com/gpu-dra-driver", "tag": "v0.2.0", "pullPolicy": "Always"},
		"imagePullSecrets":  []any{map[string]any{"name": "pull"}},
		"nvidiaDriverRoot":  "/run/nvidia/driver",
		"kubeletDir":        "/var/snap/microk8s/common/var/lib/kubelet",
		"cdiRoot":           "/etc/cdi",
		"dynamicMIG":        true,
		"consumableMemory":  true,
		"extendedResources": map[string]any{"enabled": true, "migProfiles": []any{"3g.40gb"}},
		"sharingStrategies": []any{"TimeSlicing"},
		"mpsDaemonPods":     false,
		"nodeSelector":      map[string]any{"gpu": "yes"},
		"affinity":          map[string]any{"nodeAffinity": map[string]any{}},
		"tolerations":       []any{map[string]any{"operator": "Exists"}},
		"metrics": map[string]any{"port": 9400, "podMonitor": map[string]any{"enabled": true, "interval": "1m", "labels": map[string]any{"release": "kps"}},
			"grafanaDashboard": map[string]any{"enabled": true, "label": "grafana.example.com/dashboard", "labelValue": "gpu",
				"namespace": "monitoring", "annotations": map[string]any{"grafana_folder": "GPU"}},
			"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "kps"}, "prepareSlowSeconds": 2.5}},
		"logVerbosity":        0,
		"resources":           map[string]any{"limits": map[string]any{"memory": "1Gi"}},
		"priorityClassName":   "system-cluster-critical",
		"podAnnotations":      map[string]any{"a": "b"},
		"resourceSlicePolicy": map[string]any{"enabled": false},
		"rbac":                map[string]any{"claimStatus": true},
		"serviceAccount":      map[string]any{"name": "gpu", "annotations": map[string]any{"a": "b"}},
	}
}

// TestValuesTheTestsUseRender: the schema accepts every value set the repository's tests and
// docs use; each renders and passes helm lint --strict on the oldest and newest supported
// Kubernetes.
func TestValuesTheTestsUseRender(t *testing.T) {
	for name, vals := range usedValues {
		for _, kube := range []string{kubeVersion, oldKubeVersion, "v1.34.0"} {
			t.Run(name+"/"+kube, func(t *testing.T) {
				if _, err := framework.RenderChart(chartDir, kube, release(vals)); err != nil {
					t.Error(err)
				}
				if err := framework.LintChart(chartDir, kube, release(vals)); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// TestValuesServeWouldRefuse: values that would make every plugin pod crash-loop (serve
// refuses the flag they become) or produce a broken manifest fail at install, with an error
// naming the value.
func TestValuesServeWouldRefuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string // in the error: the value's path
	}{
		// serve --sharing-strategies: a subset of TimeSlicing and MPS, case-sensitive.
		{"strategy-lowercase", map[string]any{"sharingStrategies": []any{"timeslicing"}}, "/sharingStrategies/0"},
		{"strategy-exclusive", map[string]any{"sharingStrategies": []any{"MPS", "Exclusive"}}, "/sharingStrategies/1"},
		{"strategy-joined", map[string]any{"sharingStrategies": []any{"TimeSlicing;MPS"}}, "/sharingStrategies/0"},
		{"strategies-a-string", map[string]any{"sharingStrategies": "MPS"}, "/sharingStrategies"},
		// A typo is not silently ignored.
		{"unknown-top-level-key", map[string]any{"sharingStrategy": []any{"MPS"}}, "sharingStrategy"},
		{"unknown-nested-key", map[string]any{"fakeMachine": map[string]any{"nmae": "l4x8"}}, "nmae"},
		{"unknown-metrics-key", map[string]any{"metrics": map[string]any{"addr": ":8080"}}, "addr"},
		// Wrong types.
		{"dynamic-mig-string", map[string]any{"dynamicMIG": "true"}, "/dynamicMIG"},
		{"consumable-string", map[string]any{"consumableMemory": "yes"}, "/consumableMemory"},
		{"extended-enabled-string", map[string]any{"extendedResources": map[string]any{"enabled": "true"}}, "/extendedResources/enabled"},
		{"image-tag-number", map[string]any{"image": map[string]any{"tag": 1.0}}, "/image/tag"},
		{"pull-policy", map[string]any{"image": map[string]any{"pullPolicy": "always"}}, "/image/pullPolicy"},
		{"node-selector-bool", map[string]any{"nodeSelector": map[string]any{"nvidia.com/gpu.present": true}}, "/nodeSelector"},
		{"policy-enabled-string", map[string]any{"resourceSlicePolicy": map[string]any{"enabled": "false"}}, "/resourceSlicePolicy/enabled"},
		{"claim-status-yes", map[string]any{"rbac": map[string]any{"claimStatus": "yes"}}, "/rbac/claimStatus"},
		// klog -v and the metrics port.
		{"verbosity-negative", map[string]any{"logVerbosity": -1}, "/logVerbosity"},
		{"verbosity-large", map[string]any{"logVerbosity": 11}, "/logVerbosity"},
		{"verbosity-fraction", map[string]any{"logVerbosity": 2.5}, "/logVerbosity"},
		{"verbosity-string", map[string]any{"logVerbosity": "4"}, "/logVerbosity"},
		{"port-zero", map[string]any{"metrics": map[string]any{"port": 0}}, "/metrics/port"},
		{"port-large", map[string]any{"metrics": map[string]any{"port": 65536}}, "/metrics/port"},
		{"port-string", map[string]any{"metrics": map[string]any{"port": "8080"}}, "/metrics/port"},
		// Monitoring objects: typos and values that would make an invalid object.
		{"dashboard-enabled-string", map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"enabled": "true"}}}, "/metrics/grafanaDashboard/enabled"},
		{"dashboard-label-value", map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"labelValue": "a b"}}}, "/metrics/grafanaDashboard/labelValue"},
		{"dashboard-unknown-key", map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"folder": "GPU"}}}, "folder"},
		{"rule-slow-zero", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"prepareSlowSeconds": 0}}}, "/metrics/prometheusRule/prepareSlowSeconds"},
		{"podmonitor-interval", map[string]any{"metrics": map[string]any{"podMonitor": map[string]any{"interval": "30"}}}, "/metrics/podMonitor/interval"},
		// serve refuses relative directories.
		{"kubelet-dir-relative", map[string]any{"kubeletDir": "var/lib/kubelet"}, "/kubeletDir"},
		{"cdi-root-relative", map[string]any{"cdiRoot": "var/run/cdi"}, "/cdiRoot"},
		{"driver-root-relative", map[string]any{"nvidiaDriverRoot": "run/nvidia/driver"}, "/nvidiaDriverRoot"},
		{"driver-root-empty", map[string]any{"nvidiaDriverRoot": ""}, "/nvidiaDriverRoot"},
		{"fake-driver-root-relative", map[string]any{"fakeMachine": map[string]any{"name": "l4x8", "driverRoot": "driver"}}, "/fakeMachine/driverRoot"},
		// serve --machine: one of the embedded machines.
		{"unknown-machine", map[string]any{"fakeMachine": map[string]any{"name": "dgx-z100"}}, "/fakeMachine/name"},
		// serve refuses --mig-config without --nvml=fake; the chart would drop it silently.
		{"mig-config-without-machine", map[string]any{"fakeMachine": map[string]any{"migConfig": "all-balanced"}}, "fakeMachine.migConfig needs fakeMachine.name"},
		{"fake-driver-root-without-machine", map[string]any{"fakeMachine": map[string]any{"driverRoot": "/opt/fake"}}, "fakeMachine.driverRoot needs fakeMachine.name"},
		{"fake-tmpfs-without-machine", map[string]any{"fakeMachine": map[string]any{"mountTmpfs": true}}, "fakeMachine.mountTmpfs needs fakeMachine.name"},
		// compute-domain-driver plugin refuses --fake-clique without --nvml=fake, and a clique
		// that is not <cluster UUID>.<clique ID> or none.
		{"fake-clique-without-machine", map[string]any{"computeDomains": map[string]any{"enabled": true, "fakeClique": "none"}}, "computeDomains.fakeClique needs fakeMachine.name"},
		{"fake-clique-no-id", map[string]any{"fakeMachine": map[string]any{"name": "gb200-nvl4"}, "computeDomains": map[string]any{"fakeClique": "8c3f5e0a"}}, "/computeDomains/fakeClique"},
		{"fake-clique-id-not-a-number", map[string]any{"fakeMachine": map[string]any{"name": "gb200-nvl4"}, "computeDomains": map[string]any{"fakeClique": "8c3f5e0a.x"}}, "/computeDomains/fakeClique"},
		{"fake-tmpfs-not-bool", map[string]any{"fakeMachine": map[string]any{"name": "l4x8", "mountTmpfs": "yes"}}, "/fakeMachine/mountTmpfs"},
		// serve refuses the dynamic MIG publishing flags without --dynamic-mig.
		{"partitions-first-without-dynamic-mig", map[string]any{"dynamicMIGPublishing": map[string]any{"partitionsFirst": true}}, "dynamicMIGPublishing needs dynamicMIG"},
		{"one-me-without-dynamic-mig", map[string]any{"dynamicMIGPublishing": map[string]any{"oneMediaExtensionPlacement": true}}, "dynamicMIGPublishing needs dynamicMIG"},
		{"publishing-unknown-key", map[string]any{"dynamicMIG": true, "dynamicMIGPublishing": map[string]any{"migFirst": true}}, "migFirst"},
		{"by-profile-with-dynamic-mig", map[string]any{"dynamicMIG": true, "staticMIGPublishing": map[string]any{"byProfile": true}}, "staticMIGPublishing.byProfile orders existing (static) MIG devices"},
		{"static-publishing-unknown-key", map[string]any{"staticMIGPublishing": map[string]any{"bySize": true}}, "bySize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := framework.RenderChart(chartDir, kubeVersion, release(tc.vals))
			if err == nil {
				t.Fatalf("values %v render; want them refused naming %q", tc.vals, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestSchemaMachinesAreServes: fakeMachine.name's allowed values are exactly the machines
// serve --machine accepts (gputest.Machines), plus "" for real GPUs.
func TestSchemaMachinesAreServes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			FakeMachine struct {
				Properties struct {
					Name struct {
						Enum []string `json:"enum"`
					} `json:"name"`
				} `json:"properties"`
			} `json:"fakeMachine"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(slices.Values(schema.Properties.FakeMachine.Properties.Name.Enum))
	want := slices.Sorted(slices.Values(append(gputest.Machines(), "")))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values.schema.json fakeMachine.name enum differs from gputest.Machines() (-serve +schema):\n%s", diff)
	}
}
