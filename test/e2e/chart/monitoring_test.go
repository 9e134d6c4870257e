package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
)

// monitoringValues turns on every monitoring object of the chart.
var monitoringValues = map[string]any{"metrics": map[string]any{
	"podMonitor":       map[string]any{"enabled": true},
	"grafanaDashboard": map[string]any{"enabled": true},
	"prometheusRule":   map[string]any{"enabled": true},
}}

// TestMonitoringObjects renders the chart with the dashboard, the alert rules and the PodMonitor
// on: the dashboard is a ConfigMap the Grafana sidecar loads (label grafana_dashboard: "1", a
// JSON dashboard), the rules a PrometheusRule prometheus-operator accepts, the PodMonitor selects
// the plugin's pods; every metric a panel, a template variable or an alert reads is one the
// plugin's registry exports (a plugin built as serve builds it, its collectors described); and
// docs/install.md describes every panel and alert. With the default values none is rendered.
func TestMonitoringObjects(t *testing.T) {
	for _, o := range render(t, kubeVersion, nil) {
		if o.GetKind() == "PrometheusRule" || o.GetKind() == "PodMonitor" || strings.HasSuffix(o.GetName(), "-dashboard") {
			t.Errorf("default values render %s %s; monitoring objects are opt-in", o.GetKind(), o.GetName())
		}
	}
	objs := render(t, kubeVersion, monitoringValues)
	exported := exportedMetrics(t)
	install, err := os.ReadFile("../../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	var pods map[string]string
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			pods, _, _ = unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		}
	}
	var seen []string
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-dashboard"):
			seen = append(seen, "dashboard")
			checkDashboard(t, o, exported, string(install))
		case o.GetKind() == "PrometheusRule":
			seen = append(seen, "rules")
			checkRules(t, o, exported, string(install))
		case o.GetKind() == "PodMonitor":
			seen = append(seen, "podmonitor")
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			if o.GetAPIVersion() != "monitoring.coreos.com/v1" || len(sel) == 0 {
				t.Errorf("PodMonitor %s: apiVersion %s, selector %v", o.GetName(), o.GetAPIVersion(), sel)
			}
			for k, v := range sel {
				if pods[k] != v {
					t.Errorf("PodMonitor selects %s=%s; the plugin's pods have %v", k, v, pods)
				}
			}
		}
	}
	if diff := strings.Join(seen, ","); diff != "dashboard,podmonitor,rules" {
		t.Errorf("rendered monitoring objects %q, want the dashboard, the PodMonitor and the rules once each", diff)
	}
}

func checkDashboard(t *testing.T, o *unstructured.Unstructured, exported map[string]bool, install string) {
	t.Helper()
	var cm corev1.ConfigMap
	strictConvert(t, o, &cm)
	if cm.APIVersion != "v1" || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap: apiVersion %q, labels %v; the Grafana sidecar wants grafana_dashboard: \"1\"", cm.APIVersion, cm.Labels)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("dashboard ConfigMap has %d data keys, want one JSON file", len(cm.Data))
	}
	for key, data := range cm.Data {
		if !strings.HasSuffix(key, ".json") {
			t.Errorf("dashboard key %q: the sidecar loads *.json", key)
		}
		var dash struct {
			Title, UID string
			Panels     []struct {
				Type, Title, Description string
				Targets                  []struct{ Expr string }
			}
			Templating struct {
				List []struct{ Name, Type, Query string }
			}
		}
		dec := json.NewDecoder(strings.NewReader(data))
		if err := dec.Decode(&dash); err != nil {
			t.Fatalf("dashboard %s is not JSON: %v", key, err)
		}
		if dash.Title == "" || dash.UID == "" {
			t.Errorf("dashboard %s has no title or uid", key)
		}
		panels := 0
		for _, p := range dash.Panels {
			if p.Type == "row" {
				continue
			}
			panels++
			if p.Description == "" || !strings.Contains(install, "**"+p.Title+"**") {
				t.Errorf("panel %q has no description, or docs/install.md does not describe it (**%s**)", p.Title, p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				checkExpr(t, "panel "+p.Title, q.Expr, exported)
			}
		}
		if panels < 6 {
			t.Errorf("dashboard has %d panels", panels)
		}
		for _, v := range dash.Templating.List {
			if v.Type != "query" {
				continue
			}
			m := regexp.MustCompile(`^label_values\((\w+),\s*\w+\)$`).FindStringSubmatch(v.Query)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, v.Query)
				continue
			}
			checkExpr(t, "variable "+v.Name, m[1], exported)
		}
	}
}

// prometheusRule is the part of prometheus-operator's PrometheusRule the chart uses; decoding
// rejects any other field, as the CRD's structural schema would prune or refuse it.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func checkRules(t *testing.T, o *unstructured.Unstructured, exported map[string]bool, install string) {
	t.Helper()
	var pr prometheusRule
	strictConvert(t, o, &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("rules: %s %s with %d groups", pr.APIVersion, pr.Kind, len(pr.Spec.Groups))
	}
	alerts := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			alerts++
			if !regexp.MustCompile(`^[A-Z][A-Za-z0-9]+$`).MatchString(r.Alert) {
				t.Errorf("rule %q: not an alert name", r.Alert)
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || !strings.Contains(r.Annotations["description"], "docs/install.md") {
				t.Errorf("%s: the annotations need a summary and a description pointing at docs/install.md: %v", r.Alert, r.Annotations)
			}
			if !strings.Contains(install, "#### "+r.Alert+"\n") {
				t.Errorf("%s: docs/install.md has no \"#### %s\" saying what to do when it fires", r.Alert, r.Alert)
			}
			if r.For != "" && !regexp.MustCompile(`^([0-9]+(ms|s|m|h))+$`).MatchString(r.For) {
				t.Errorf("%s: for %q is not a duration", r.Alert, r.For)
			}
			checkExpr(t, "alert "+r.Alert, r.Expr, exported)
		}
	}
	if alerts < 5 {
		t.Errorf("%d alerts", alerts)
	}
}

// strictConvert decodes o into a typed object, refusing unknown fields.
func strictConvert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	data, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// checkExpr fails unless expr reads at least one metric and only metrics exported has (a
// histogram's _bucket, _sum and _count series included).
func checkExpr(t *testing.T, where, expr string, exported map[string]bool) {
	t.Helper()
	names := promqlMetrics(expr)
	if len(names) == 0 {
		t.Errorf("%s: %q reads no metric", where, expr)
	}
	for _, n := range names {
		if !exported[n] {
			t.Errorf("%s: %q reads %s, which the plugin does not export", where, expr, n)
		}
	}
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlNumbers  = regexp.MustCompile(`\boffset\s+-?[0-9a-z]+|\b[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\b`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true, "atan2": true,
		"group_left": true, "group_right": true}
)

// promqlMetrics returns the metric names a PromQL expression reads: its identifiers once label
// matchers, ranges, strings, grouping clauses, offsets and numbers are removed, less function names
// (followed by "(") and operators.
func promqlMetrics(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " ")
	e = promqlNumbers.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promqlIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		if promqlKeywords[strings.ToLower(name)] || strings.HasPrefix(strings.TrimLeft(e[loc[1]:], " "), "(") {
			continue
		}
		out = append(out, name)
	}
	return out
}

// recorder is a Registerer that registers on a real registry and notes each collector's metric
// names, with the series names a histogram adds.
type recorder struct {
	*prometheus.Registry
	names map[string]bool
}

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	_, histogram := c.(*prometheus.HistogramVec)
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		r.names[m[1]] = true
		if histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				r.names[m[1]+s] = true
			}
		}
	}
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// exportedMetrics are the metric names a plugin serves on /metrics, from its registry: the
// plugin's collectors (draplugin registers them on Config.Metrics) and the Go and process
// collectors serve adds (examples/gpu-dra-driver/serve.go, newPlugin).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	node, err := draplugintest.NewNode("dgx-a100-40gb", draplugintest.WithDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	rec := &recorder{Registry: prometheus.NewRegistry(), names: map[string]bool{}}
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := node.NewPlugin(context.Background(), func(c *draplugin.Config) { c.Metrics = rec })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	var plugin []string
	for n := range rec.names {
		if strings.HasPrefix(n, "gpudra_") {
			plugin = append(plugin, n)
		}
	}
	sort.Strings(plugin)
	if len(plugin) < 8 {
		t.Fatalf("the plugin's registry has %d gpudra metrics: %v", len(plugin), plugin)
	}
	t.Logf("exported: %s", fmt.Sprint(plugin))
	return rec.names
}

// TestPromQLMetrics holds the metric name extraction the monitoring test relies on.
func TestPromQLMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (instance, le) (rate(a_bucket{x="y",instance=~"$i"}[10m]))) > 10`: {"a_bucket"},
		`max by (instance) (b) > 0 and on(instance) c{op="rate(d)"} offset 5m`:                             {"b", "c"},
		`sum without (le) (increase(e_total[1h])) / ignoring(x) group_left f`:                              {"e_total", "f"},
		`1e3 * g`: {"g"},
	} {
		if got := promqlMetrics(expr); !slices.Equal(got, want) {
			t.Errorf("promqlMetrics(%q) = %q, want %q", expr, got, want)
		}
	}
}
