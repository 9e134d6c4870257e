package gpudra

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra/internal/checkpoint"
)

const (
	opPrepare   = "prepare"
	opUnprepare = "unprepare"
)

// Metric names of the plugin core, all in namespace "gpudra", subsystem "plugin".
const (
	MetricPrepareDuration   = "gpudra_plugin_prepare_duration_seconds"
	MetricUnprepareDuration = "gpudra_plugin_unprepare_duration_seconds"
	MetricPreparedClaims    = "gpudra_plugin_prepared_claims"
	MetricMIGInstances      = "gpudra_plugin_mig_instances"
	MetricErrors            = "gpudra_plugin_errors_total"
	MetricUnhealthyGPUs     = "gpudra_plugin_unhealthy_gpus"
)

type pluginMetrics struct {
	prepare   *prometheus.HistogramVec
	unprepare *prometheus.HistogramVec
	prepared  prometheus.GaugeFunc
	instances prometheus.GaugeFunc
	errors    *prometheus.CounterVec
	unhealthy prometheus.Gauge
}

// newPluginMetrics creates the plugin's collectors and registers them on reg (nothing when nil).
// Registration errors (a second plugin on the same registry) leave the collectors working but
// unexported.
func newPluginMetrics(reg prometheus.Registerer, p *Plugin) *pluginMetrics {
	buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &pluginMetrics{
		prepare: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "gpudra", Subsystem: "plugin",
			Name: "prepare_duration_seconds", Help: "Time to prepare one ResourceClaim, by result (success, error).", Buckets: buckets},
			[]string{"result"}),
		unprepare: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "gpudra", Subsystem: "plugin",
			Name: "unprepare_duration_seconds", Help: "Time to unprepare one ResourceClaim, by result (success, error).", Buckets: buckets},
			[]string{"result"}),
		prepared: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpudra", Subsystem: "plugin",
			Name: "prepared_claims", Help: "ResourceClaims prepared on this node (checkpoint phase PrepareCompleted)."},
			func() float64 { n, _ := p.counts(); return float64(n) }),
		instances: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpudra", Subsystem: "plugin",
			Name: "mig_instances", Help: "Dynamic MIG instances the plugin created and holds for claims."},
			func() float64 { _, n := p.counts(); return float64(n) }),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpudra", Subsystem: "plugin",
			Name: "errors_total", Help: "Failed prepare and unprepare steps, by operation and step."}, []string{"operation", "step"}),
		unhealthy: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpudra", Subsystem: "plugin",
			Name: "unhealthy_gpus", Help: "Physical GPUs currently marked unhealthy (their devices are tainted)."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.prepare, m.unprepare, m.prepared, m.instances, m.errors, m.unhealthy} {
			_ = reg.Register(c)
		}
	}
	return m
}

func (m *pluginMetrics) observe(op string, d time.Duration, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	h := m.prepare
	if op == opUnprepare {
		h = m.unprepare
	}
	h.WithLabelValues(result).Observe(d.Seconds())
}

func (m *pluginMetrics) stepError(op, step string) { m.errors.WithLabelValues(op, step).Inc() }

// counts returns the prepared claims and the MIG instances the plugin created, from the
// checkpoint; the gauges compute them when scraped.
func (p *Plugin) counts() (prepared, instances int) {
	for _, c := range p.store.List() {
		if c.Phase == checkpoint.PrepareCompleted {
			prepared++
		}
		for _, d := range c.Devices {
			if d.MIG != nil && d.MIG.Created {
				instances++
			}
		}
	}
	return prepared, instances
}
