package draplugin

import (
	"slices"
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
	// MetricHealthEvents counts the health transitions the plugin applies to a GPU or a MIG
	// device (labels state: "unhealthy" when it is tainted, or its taint's reason changes,
	// "healthy" when the taint is removed; reason: the class of the taint set or removed,
	// HealthReasonXID, HealthReasonECC, HealthReasonGPULost or HealthReasonMarked). An event that
	// repeats the current state (the same XID again) changes nothing and is not counted.
	MetricHealthEvents = "gpudra_plugin_health_events_total"
	// MetricPublish counts the ResourceSlice publishes of the plugin: the first one of Start
	// and every Publish, the republishes after health and MIG changes and after kubelet
	// deleted the node's slices included (label result:
	// "success", "error"). A failed republish is retried with back-off, so its errors count the
	// retries. Success means the slices were built and handed to the kubelet-plugin helper,
	// whose ResourceSlice controller writes them to the API server.
	MetricPublish = "gpudra_plugin_publish_total"
	// MetricCheckpointRecoveries counts, once per plugin (New), what opening the checkpoint had
	// to recover from (label reason: "fresh", no checkpoint: a first start or a wiped state
	// directory; "corrupt", moved aside; "rebooted", written in an earlier boot; "migrated",
	// from an older schema). A start with a sound checkpoint of this boot counts nothing; one
	// start may count several reasons.
	MetricCheckpointRecoveries = "gpudra_plugin_checkpoint_recoveries_total"
	// MetricReconciledClaims counts the claims each Reconcile (Start runs one) repaired or kept,
	// by action (label action: "rolled_back", "unprepare_finished", "forgotten", "spec_rewritten",
	// "spec_pruned", "adopted", "not_adopted", "unreadable_kept"; the ReconcileReport fields of
	// the same names).
	MetricReconciledClaims = "gpudra_plugin_reconciled_claims_total"
)

// The reason classes of MetricHealthEvents: the taint's value is more precise (the XID number,
// the caller's reason of MarkUnhealthy), the class keeps the metric's series few.
const (
	// HealthReasonXID is a critical XID event of NVML (taint value "xid-<number>").
	HealthReasonXID = "xid"
	// HealthReasonECC is a double-bit ECC error event (taint value "ecc-dbe").
	HealthReasonECC = "ecc-dbe"
	// HealthReasonGPULost is a GPU that fell off the bus (taint value "gpu-lost").
	HealthReasonGPULost = "gpu-lost"
	// HealthReasonMarked is a state set by MarkUnhealthy, whatever the reason given.
	HealthReasonMarked = "marked"
)

type metrics struct {
	prepare    *prometheus.HistogramVec
	unprepare  *prometheus.HistogramVec
	errors     *prometheus.CounterVec
	health     *prometheus.CounterVec
	publish    *prometheus.CounterVec
	recoveries *prometheus.CounterVec
	reconciled *prometheus.CounterVec
}

// Label values of the counters, each created at 0 so that every series exists from the start.
var (
	healthStates     = []string{"unhealthy", "healthy"}
	healthReasons    = []string{HealthReasonXID, HealthReasonECC, HealthReasonGPULost, HealthReasonMarked}
	publishResults   = []string{"success", "error"}
	recoveryReasons  = []string{"fresh", "corrupt", "rebooted", "migrated"}
	reconcileActions = []string{"rolled_back", "unprepare_finished", "forgotten", "spec_rewritten", "spec_pruned", "adopted", "not_adopted", "unreadable_kept"}
)

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
		health: counter(opts("health_events_total", "Health transitions applied to GPUs and MIG devices, by state entered (unhealthy, healthy) and reason class (xid, ecc-dbe, gpu-lost, marked)."),
			[]string{"state", "reason"}, healthStates, healthReasons),
		publish: counter(opts("publish_total", "ResourceSlice publishes, by result (success, error); failed republishes are retried with back-off."),
			[]string{"result"}, publishResults),
		recoveries: counter(opts("checkpoint_recoveries_total", "What opening the checkpoint at start recovered from, by reason (fresh, corrupt, rebooted, migrated)."),
			[]string{"reason"}, recoveryReasons),
		reconciled: counter(opts("reconciled_claims_total", "Claims the reconciliation at start repaired or kept, by action."),
			[]string{"action"}, reconcileActions),
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
	for _, c := range append([]prometheus.Collector{m.prepare, m.unprepare, m.errors, m.health, m.publish, m.recoveries, m.reconciled}, gauges...) {
		_ = reg.Register(c)
	}
	return m
}

// counter is a counter vector with every combination of the given label values created at 0:
// a series that exists before its first increment lets increase() see that increment.
func counter(o prometheus.Opts, labels []string, values ...[]string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts(o), labels)
	combos := [][]string{nil}
	for _, vs := range values {
		var next [][]string
		for _, combo := range combos {
			for _, v := range vs {
				next = append(next, append(slices.Clone(combo), v))
			}
		}
		combos = next
	}
	for _, combo := range combos {
		c.WithLabelValues(combo...)
	}
	return c
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

// healthEvent counts a health transition of a GPU or MIG device.
func (m *metrics) healthEvent(state, reason string) {
	m.health.WithLabelValues(state, reason).Inc()
}

// published counts a ResourceSlice publish.
func (m *metrics) published(err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.publish.WithLabelValues(result).Inc()
}

// countCheckpoint counts what opening the checkpoint recovered from.
func (m *metrics) countCheckpoint(st CheckpointStatus) {
	for reason, found := range map[string]bool{"fresh": st.Fresh, "corrupt": st.Corrupt, "rebooted": st.Rebooted, "migrated": st.Migrated != 0} {
		if found {
			m.recoveries.WithLabelValues(reason).Inc()
		}
	}
}

// countReconciled counts the claims a reconciliation repaired or kept, by action.
func (m *metrics) countReconciled(rep *ReconcileReport) {
	for action, claims := range map[string][]string{
		"rolled_back": rep.RolledBack, "unprepare_finished": rep.UnprepareFinished, "forgotten": rep.Forgotten,
		"spec_rewritten": rep.SpecsRewritten, "spec_pruned": rep.SpecsPruned, "adopted": rep.Adopted,
		"not_adopted": rep.NotAdopted, "unreadable_kept": rep.Unreadable,
	} {
		m.reconciled.WithLabelValues(action).Add(float64(len(claims)))
	}
}
