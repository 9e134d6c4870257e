package draplugin

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/mig"
)

// Metric names of the plugin, all in namespace "gpudra", subsystem "plugin".
const (
	MetricPrepareDuration   = "gpudra_plugin_prepare_duration_seconds"
	MetricUnprepareDuration = "gpudra_plugin_unprepare_duration_seconds"
	MetricPreparedClaims    = "gpudra_plugin_prepared_claims"
	MetricMIGInstances      = "gpudra_plugin_mig_instances"
	MetricErrors            = "gpudra_plugin_errors_total"
	MetricUnhealthyGPUs     = "gpudra_plugin_unhealthy_gpus"
	// MetricMIGCatalogDifferences is 1 for every MIG profile property where the built-in
	// catalog differs from what the GPU reports (labels model, profile, property); the GPU's
	// values are used.
	MetricMIGCatalogDifferences = "gpudra_plugin_mig_catalog_differences"
	// MetricGPUEnumerationFailures is 1 for every GPU that failed to enumerate and is not
	// served (labels index, uuid when known, op: the NVML call, return: its error).
	MetricGPUEnumerationFailures = "gpudra_plugin_gpu_enumeration_failures"
)

type metrics struct {
	prepare   *prometheus.HistogramVec
	unprepare *prometheus.HistogramVec
	errors    *prometheus.CounterVec
}

// newMetrics creates the plugin's collectors and registers them on reg (nothing when nil).
// counts and unhealthy are read when the gauges are scraped. Registration errors (a second
// plugin on the same registry) leave the collectors working but unexported.
func newMetrics(reg prometheus.Registerer, counts func() (prepared, instances int), unhealthy func() int, diffs []mig.Difference, failed []*gpu.DeviceError) *metrics {
	buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "gpudra", Subsystem: "plugin", Name: name, Help: help}
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		o := opts(name, help)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets}, []string{"result"})
	}
	m := &metrics{
		prepare:   histogram("prepare_duration_seconds", "Time to prepare one ResourceClaim, by result (success, error)."),
		unprepare: histogram("unprepare_duration_seconds", "Time to unprepare one ResourceClaim, by result (success, error)."),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts(opts("errors_total", "Failed prepare and unprepare steps, by operation and step.")),
			[]string{"operation", "step"}),
	}
	if reg == nil {
		return m
	}
	gauges := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("prepared_claims", "ResourceClaims prepared on this node (checkpoint phase PrepareCompleted).")),
			func() float64 { n, _ := counts(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("mig_instances", "Dynamic MIG instances the plugin created and holds for claims.")),
			func() float64 { _, n := counts(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("unhealthy_gpus", "Physical GPUs currently marked unhealthy (their devices are tainted).")),
			func() float64 { return float64(unhealthy()) }),
	}
	catalog := prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("mig_catalog_differences",
		"1 for each MIG profile property where the built-in catalog differs from what the GPU reports; the GPU's value is used.")),
		[]string{"model", "profile", "property"})
	for _, d := range diffs {
		catalog.WithLabelValues(d.Model, d.Profile, d.Property).Set(1)
	}
	gauges = append(gauges, catalog, enumerationFailures(opts("gpu_enumeration_failures",
		"1 for each GPU that failed to enumerate (NVML call op returned return) and is not served; claims prepared on it are kept."), failed))
	for _, c := range append([]prometheus.Collector{m.prepare, m.unprepare, m.errors}, gauges...) {
		_ = reg.Register(c)
	}
	return m
}

// enumerationFailures is the gauge of GPUs that failed to enumerate.
func enumerationFailures(o prometheus.Opts, failed []*gpu.DeviceError) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts(o), []string{"index", "uuid", "op", "return"})
	for _, e := range failed {
		ret := ""
		if e.Return != nil {
			ret = e.Return.Error() // an nvml.Return: its name, as String gives it
		}
		g.WithLabelValues(strconv.Itoa(e.Index), e.UUID, e.Op, ret).Set(1)
	}
	return g
}

func (m *metrics) observe(op Op, d time.Duration, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	h := m.prepare
	if op == OpUnprepare {
		h = m.unprepare
	}
	h.WithLabelValues(result).Observe(d.Seconds())
}

func (m *metrics) stepError(op Op, step Step) {
	m.errors.WithLabelValues(string(op), string(step)).Inc()
}

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
