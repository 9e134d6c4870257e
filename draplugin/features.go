package draplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra"
)

// APIFeatures is what NegotiateFeatures learned about an API server: which optional
// ResourceSlice features (gpudra.OptionalFeatures) it keeps and which it drops. Give it to New
// (Config.APIFeatures) to publish only what the server keeps.
type APIFeatures struct {
	// Kept are the features whose fields the server returned as sent, in the order of
	// gpudra.OptionalFeatures.
	Kept []gpudra.Feature
	// Dropped are the features whose fields it dropped, in the same order, each with the
	// fields that say so.
	Dropped []DroppedFeature
	// OtherFields are fields of the probe the server dropped that belong to none of the
	// features; they are only reported.
	OtherFields []string
}

// DroppedFeature is an optional ResourceSlice feature the API server drops: its feature gate is
// off, or the server predates the feature.
type DroppedFeature struct {
	// Feature is the feature the server drops.
	Feature gpudra.Feature
	// Fields are the probe's fields the server dropped, as field paths
	// ("spec.sharedCounters", "spec.devices[0].taints").
	Fields []string
}

// String says which feature is dropped and why, for a log line.
func (d DroppedFeature) String() string {
	return fmt.Sprintf("%s (the API server dropped %s from a dry-run ResourceSlice: its feature gate is off or the server predates it)",
		d.Feature, strings.Join(d.Fields, ", "))
}

// Without returns the dropped features (for gpudra.WithoutFeatures); none for a nil receiver.
func (f *APIFeatures) Without() []gpudra.Feature {
	if f == nil {
		return nil
	}
	var out []gpudra.Feature
	for _, d := range f.Dropped {
		out = append(out, d.Feature)
	}
	return out
}

// DefaultNegotiationBackoff is how NegotiateFeatures retries an API server that does not answer
// or fails transiently: 7 tries over about half a minute.
func DefaultNegotiationBackoff() wait.Backoff {
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 7, Cap: 15 * time.Second}
}

// NegotiateOption configures NegotiateFeatures.
type NegotiateOption func(*negotiation)

type negotiation struct {
	backoff wait.Backoff
}

// WithNegotiationBackoff sets how transient failures are retried (default
// DefaultNegotiationBackoff); Steps is the number of tries.
func WithNegotiationBackoff(b wait.Backoff) NegotiateOption {
	return func(n *negotiation) { n.backoff = b }
}

// ErrResourceSlicesNotServed is returned (wrapped) by NegotiateFeatures when the API server does
// not serve ResourceSlices in the version the kubelet-plugin helper publishes.
var ErrResourceSlicesNotServed = errors.New("the API server does not serve resource.k8s.io/v1 ResourceSlices, which the kubelet-plugin helper publishes (Kubernetes 1.34 or later)")

// NegotiateFeatures asks the API server which optional ResourceSlice features it keeps. It checks
// through discovery that resource.k8s.io/v1 ResourceSlices are served, then creates two probe
// slices of node nodeName for driverName with server-side dry run (nothing is stored; it needs
// the "create" verb on resourceslices, as publishing does): one with shared counters, one with a
// device that uses every optional field (counter consumption, consumable capacity, a taint,
// binding conditions). A feature whose fields come back missing is dropped: the API server
// strips the fields of disabled feature gates instead of rejecting the slice, so a driver that
// published them anyway would publish less than it thinks (dynamic MIG partitions without their
// counters could be allocated together). A feature counts as dropped when any field it guards
// is missing from the reply; features carry the gate names the kubelet-plugin helper's
// resourceslice.DroppedFieldsError reports.
//
// A server that is unreachable or fails transiently is retried (WithNegotiationBackoff); an
// answer that cannot change by retrying (ResourceSlices not served, the probe forbidden or
// rejected as invalid) is returned at once. Either way the error says why; a driver should then
// not start publishing, as its slices could lose fields unnoticed.
func NegotiateFeatures(ctx context.Context, client kubernetes.Interface, driverName, nodeName string, opts ...NegotiateOption) (*APIFeatures, error) {
	if client == nil {
		return nil, errors.New("negotiate ResourceSlice features: the API client is nil")
	}
	if err := gpudra.ValidateDriverName(driverName); err != nil {
		return nil, fmt.Errorf("negotiate ResourceSlice features: %w", err)
	}
	if err := gpudra.ValidateNodeName(nodeName); err != nil {
		return nil, fmt.Errorf("negotiate ResourceSlice features: %w", err)
	}
	n := negotiation{backoff: DefaultNegotiationBackoff()}
	for _, o := range opts {
		o(&n)
	}
	logger := klog.FromContext(ctx)
	var out *APIFeatures
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, n.backoff, func(ctx context.Context) (bool, error) {
		out, last = negotiateOnce(ctx, client, driverName, nodeName)
		switch {
		case last == nil:
			return true, nil
		case permanent(last):
			return false, last
		}
		logger.Info("Negotiating ResourceSlice features with the API server failed; retrying", "err", last)
		return false, nil
	})
	switch {
	case err == nil:
		return out, nil
	case last != nil && !permanent(last):
		return nil, fmt.Errorf("negotiate ResourceSlice features with the API server (gave up after %d tries): %w", n.backoff.Steps, last)
	default:
		return nil, fmt.Errorf("negotiate ResourceSlice features with the API server: %w", err)
	}
}

// permanent says whether a negotiation error stays the same however often it is retried.
func permanent(err error) bool {
	return errors.Is(err, ErrResourceSlicesNotServed) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err)
}

// negotiateOnce asks once: discovery, then the probes.
func negotiateOnce(ctx context.Context, client kubernetes.Interface, driverName, nodeName string) (*APIFeatures, error) {
	gv := resourceapi.SchemeGroupVersion.String()
	list, err := client.Discovery().ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		return nil, ErrResourceSlicesNotServed
	case err != nil:
		return nil, fmt.Errorf("discover %s: %w", gv, err)
	case !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "resourceslices" }):
		return nil, ErrResourceSlicesNotServed
	}
	dropped := map[gpudra.Feature][]string{}
	var other []string
	for _, sent := range probeSlices(driverName, nodeName) {
		got, err := client.ResourceV1().ResourceSlices().Create(ctx, sent, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return nil, fmt.Errorf("dry-run create of probe ResourceSlice %s for node %s: %w", sent.GenerateName, nodeName, err)
		}
		o, err := compareProbe(sent, got, dropped)
		if err != nil {
			return nil, err
		}
		other = append(other, o...)
	}
	out := &APIFeatures{OtherFields: other}
	for _, f := range gpudra.OptionalFeatures() {
		if fields, ok := dropped[f]; ok {
			out.Dropped = append(out.Dropped, DroppedFeature{Feature: f, Fields: fields})
		} else {
			out.Kept = append(out.Kept, f)
		}
	}
	return out, nil
}

// probeSlices are the slices NegotiateFeatures sends: the API allows shared counters only in a
// slice without devices, so the counters get a slice of their own. They name the node (an
// admission policy may confine the driver to its node's slices) and a pool of their own.
func probeSlices(driverName, nodeName string) []*resourceapi.ResourceSlice {
	one := resource.MustParse("1Gi")
	slice := func() *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: nodeName + "-" + driverName + "-feature-probe-"},
			Spec: resourceapi.ResourceSliceSpec{Driver: driverName, NodeName: ptr.To(nodeName),
				Pool: resourceapi.ResourcePool{Name: "gpudra-feature-probe", Generation: 1, ResourceSliceCount: 2}},
		}
	}
	counters := slice()
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "probe", Counters: map[string]resourceapi.Counter{"memory": {Value: one}}}}
	devices := slice()
	devices.Spec.Devices = []resourceapi.Device{{
		Name: "probe",
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: one,
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &one, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &one}}}},
		AllowMultipleAllocations: ptr.To(true),
		ConsumesCounters:         []resourceapi.DeviceCounterConsumption{{CounterSet: "probe", Counters: map[string]resourceapi.Counter{"memory": {Value: one}}}},
		Taints:                   []resourceapi.DeviceTaint{{Key: driverName + "/feature-probe", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		BindingConditions:        []string{driverName + "/probe-bound"},
		BindingFailureConditions: []string{driverName + "/probe-failed"},
		BindsToNode:              ptr.To(true),
	}}
	return []*resourceapi.ResourceSlice{counters, devices}
}

// featureOfField returns the optional feature that guards a JSON field name of
// ResourceSliceSpec, Device or DeviceCapacity, as the API server's ResourceSlice strategy drops
// them.
func featureOfField(name string) (gpudra.Feature, bool) {
	switch name {
	case "sharedCounters", "perDeviceNodeSelection", "consumesCounters":
		return gpudra.FeaturePartitionableDevices, true
	case "allowMultipleAllocations", "requestPolicy":
		return gpudra.FeatureConsumableCapacity, true
	case "taints":
		return gpudra.FeatureDeviceTaints, true
	case "bindingConditions", "bindingFailureConditions", "bindsToNode":
		return gpudra.FeatureDeviceBindingConditions, true
	}
	return "", false
}

// compareProbe adds to dropped the features whose fields the server dropped from sent, with
// those fields, and returns the dropped fields of no feature. A feature counts as dropped when
// any field it guards is missing. The kubelet-plugin helper's resourceslice.DroppedFieldsError
// names the same features (the tests hold the two together) but looks only at the fields that
// tell its gate apart (allowMultipleAllocations, not requestPolicy), and says nothing of which
// fields went.
func compareProbe(sent, got *resourceapi.ResourceSlice, dropped map[gpudra.Feature][]string) ([]string, error) {
	if got == nil {
		return nil, fmt.Errorf("dry-run create of probe ResourceSlice %s: the API server returned no object", sent.GenerateName)
	}
	fields, err := droppedFields(sent, got)
	if err != nil {
		return nil, err
	}
	var other []string
	for _, path := range fields {
		f, ok := featureOf(path)
		if !ok {
			other = append(other, path)
			continue
		}
		dropped[f] = append(dropped[f], path)
	}
	return other, nil
}

// featureOf returns the feature of the first segment of path that names a guarded field.
func featureOf(path string) (gpudra.Feature, bool) {
	for _, seg := range strings.FieldsFunc(path, func(r rune) bool { return r == '.' || r == '[' || r == ']' }) {
		if f, ok := featureOfField(seg); ok {
			return f, true
		}
	}
	return "", false
}

// droppedFields returns the field paths set in sent's spec and missing from got's, in a stable
// order. Values that changed (a quantity normalized, a default filled in) are not drops.
func droppedFields(sent, got *resourceapi.ResourceSlice) ([]string, error) {
	s, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&sent.Spec)
	if err != nil {
		return nil, fmt.Errorf("compare probe ResourceSlice: %w", err)
	}
	g, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&got.Spec)
	if err != nil {
		return nil, fmt.Errorf("compare probe ResourceSlice: %w", err)
	}
	var out []string
	missing("spec", s, g, &out)
	return out, nil
}

// missing appends to out the paths below path that are in sent and not in got.
func missing(path string, sent, got any, out *[]string) {
	switch s := sent.(type) {
	case map[string]any:
		g, _ := got.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(s)) {
			gv, ok := g[k]
			if !ok {
				*out = append(*out, path+"."+k)
				continue
			}
			missing(path+"."+k, s[k], gv, out)
		}
	case []any:
		g, _ := got.([]any)
		for i := range s {
			p := fmt.Sprintf("%s[%d]", path, i)
			if i >= len(g) {
				*out = append(*out, p)
				continue
			}
			missing(p, s[i], g[i], out)
		}
	}
}

// sliceOptions are the builder options the plugin publishes with: the configured ones, the
// health taints, and without the features the API server drops (Config.APIFeatures), which it
// logs in one line.
func sliceOptions(logger klog.Logger, cfg Config, taints func(device string) []resourceapi.DeviceTaint) []gpudra.Option {
	opts := append(slices.Clone(cfg.SliceOptions), gpudra.WithDeviceTaints(taints))
	f := cfg.APIFeatures
	if f == nil {
		return opts
	}
	asked := gpudra.NewBuilder(opts...).Features()
	opts = append(opts, gpudra.WithoutFeatures(f.Without()...))
	kept := gpudra.NewBuilder(opts...).Features()
	if len(f.Dropped) == 0 && len(f.OtherFields) == 0 {
		logger.Info("The API server keeps every optional ResourceSlice feature", "features", f.Kept)
		return opts
	}
	dropped := make([]string, 0, len(f.Dropped))
	for _, d := range f.Dropped {
		dropped = append(dropped, d.String())
	}
	var off []string
	for _, a := range asked {
		if !slices.Contains(kept, a) {
			off = append(off, turnedOff(a))
		}
	}
	if len(off) == 0 {
		off = []string{"nothing: the driver uses none of them"}
	}
	kv := []any{"dropped", dropped, "turnedOff", off, "kept", append([]gpudra.Feature{}, f.Kept...)}
	if len(f.OtherFields) > 0 {
		kv = append(kv, "otherDroppedFields", f.OtherFields)
	}
	logger.Info("The API server drops optional ResourceSlice features; publishing without them", kv...)
	return opts
}

// turnedOff says what the driver publishes instead when a feature it uses is dropped.
func turnedOff(f gpudra.Feature) string {
	switch f {
	case gpudra.FeaturePartitionableDevices:
		return "dynamic MIG: MIG-capable GPUs are published as they are partitioned now (static MIG devices, or full GPUs)"
	case gpudra.FeatureConsumableCapacity:
		return "consumable memory: full GPUs are published for exclusive use"
	case gpudra.FeatureDeviceTaints:
		return "health taints: unhealthy devices are reported only through WatchHealthStatus"
	}
	return string(f)
}
