package check

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/objects"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/internal/input"
	"github.com/gpudra/gpudra/selectors/finding"
	"github.com/gpudra/gpudra/selectors/manifest"
)

// servesComputeDomain reports whether gv and kind are the ComputeDomain the compute-domain
// driver's CRD (resource.nvidia.com/v1beta1) adds to a cluster where its chart is installed.
func servesComputeDomain(gv schema.GroupVersion, kind string) bool {
	return gv == cdv1beta1.GroupVersion() && kind == cdv1beta1.Kind
}

// computeDomainClasses are the compute-domain driver's DeviceClasses, as its chart installs them
// (examples/deploy/computedomain/deviceclasses.yaml).
func computeDomainClasses() []*resourceapi.DeviceClass {
	class := func(name, selector string) *resourceapi.DeviceClass {
		expr := fmt.Sprintf("device.driver == '%s' && %s", computedomain.DriverName, selector)
		return &resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
				{CEL: &resourceapi.CELDeviceSelector{Expression: expr}},
			}},
		}
	}
	attr := func(name string) string {
		return fmt.Sprintf("device.attributes['%s'].%s", computedomain.DriverName, name)
	}
	return []*resourceapi.DeviceClass{
		class(computedomain.DaemonDeviceClass, fmt.Sprintf("%s == '%s'", attr(computedomain.AttrType), computedomain.TypeDaemon)),
		class(computedomain.ChannelDeviceClass, fmt.Sprintf("%s == '%s' && %s == 0", attr(computedomain.AttrType), computedomain.TypeChannel, attr(computedomain.AttrID))),
	}
}

// readComputeDomains decodes the ComputeDomains of data as the CRD's schema checks them:
// unknown fields, spec.numNodes of 0 or more, spec.channel.resourceClaimTemplate.name a DNS
// subdomain, spec.channel.allocationMode Single or All. The valid ones are returned, in
// namespace unless they name one; the others are findings naming the field.
func readComputeDomains(data []byte, namespace string) ([]*cdv1beta1.ComputeDomain, []finding.Finding) {
	docs, err := manifest.SplitDocuments(data)
	if err != nil {
		return nil, nil // manifest.Decode reports it
	}
	var out []*cdv1beta1.ComputeDomain
	var fs []finding.Finding
	for _, d := range docs {
		tm, om, err := manifest.Meta(d)
		if err != nil || !servesComputeDomain(tm.GroupVersionKind().GroupVersion(), tm.Kind) {
			continue
		}
		object := cdv1beta1.Kind + " " + om.Name
		cd := &cdv1beta1.ComputeDomain{}
		if err := input.UnmarshalStrict(d, cd); err != nil {
			fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleInvalidComputeDomain, Object: object,
				Message: err.Error() + ": the CRD allows spec.numNodes and spec.channel (resourceClaimTemplate.name, allocationMode)"})
			continue
		}
		if bad := computeDomainFindings(cd, object); len(bad) > 0 {
			fs = append(fs, bad...)
			continue
		}
		if cd.Namespace == "" {
			cd.Namespace = namespace
		}
		out = append(out, cd)
	}
	return out, fs
}

// computeDomainFindings are the values of a decoded ComputeDomain that the CRD's schema refuses.
func computeDomainFindings(cd *cdv1beta1.ComputeDomain, object string) []finding.Finding {
	var fs []finding.Finding
	add := func(field, msg string) {
		fs = append(fs, finding.Finding{Severity: finding.SeverityError, Rule: finding.RuleInvalidComputeDomain, Object: object, Field: field, Message: msg})
	}
	if cd.Spec.NumNodes < 0 {
		add("spec.numNodes", fmt.Sprintf("Invalid value: %d: must be 0 or more", cd.Spec.NumNodes))
	}
	ch := cd.Spec.Channel
	if ch == nil {
		return fs
	}
	if errs := validation.IsDNS1123Subdomain(ch.ResourceClaimTemplate.Name); len(errs) > 0 {
		add("spec.channel.resourceClaimTemplate.name", fmt.Sprintf("Invalid value: %q: %s", ch.ResourceClaimTemplate.Name, strings.Join(errs, "; ")))
	}
	switch ch.AllocationMode {
	case "", cdv1beta1.AllocationModeSingle, cdv1beta1.AllocationModeAll:
	default:
		add("spec.channel.allocationMode", fmt.Sprintf("Unsupported value: %q: supported values: %q, %q",
			ch.AllocationMode, cdv1beta1.AllocationModeSingle, cdv1beta1.AllocationModeAll))
	}
	return fs
}

// channelTemplates are the ResourceClaimTemplates the controller makes for the domains' channels
// in clique, except those the manifest defines itself.
func channelTemplates(domains []*cdv1beta1.ComputeDomain, objs []manifest.Object, clique string) []*resourceapi.ResourceClaimTemplate {
	var out []*resourceapi.ResourceClaimTemplate
	for _, cd := range domains {
		if cd.Spec.Channel == nil {
			continue
		}
		name := cd.Spec.Channel.ResourceClaimTemplate.Name
		if slices.ContainsFunc(objs, func(o manifest.Object) bool { return o.Kind == "ResourceClaimTemplate" && o.Name == name }) {
			continue
		}
		out = append(out, objects.ChannelTemplate(cd, clique))
	}
	return out
}

// machineClique is the NVLink clique of the machine's compute-domain devices (the first, by
// name, when nodes are in several); "" when it publishes none.
func machineClique(rs []*resourceapi.ResourceSlice) string {
	var cliques []string
	for _, s := range rs {
		if s == nil || s.Spec.Driver != computedomain.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes[computedomain.AttrCliqueID]; ok && a.StringValue != nil {
				cliques = append(cliques, *a.StringValue)
			}
		}
	}
	if len(cliques) == 0 {
		return ""
	}
	return slices.Min(cliques)
}

// domainReasons explains the claims of the domains' channel templates that did not fit, in
// terms of the domains: a machine in no NVLink clique publishes no channel, and a domain of more
// nodes than the machine has gets one channel per node.
func domainReasons(domains []*cdv1beta1.ComputeDomain, claims []*resourceapi.ResourceClaim, results []ClaimResult, clique string, nodes int) {
	for i, claim := range claims {
		cd := domainOf(domains, claim.Name)
		if cd == nil || results[i].Allocated {
			continue
		}
		var why string
		switch {
		case clique == "":
			why = fmt.Sprintf("no device of class %s on this machine: the compute-domain plugin publishes a node's IMEX channel only when all its GPUs are in one NVLink clique, and no node here publishes one (no NVLink clique)",
				computedomain.ChannelDeviceClass)
		case cd.Spec.NumNodes > nodes:
			why = fmt.Sprintf("ComputeDomain %s spans %d nodes (spec.numNodes), one channel per node: this machine has %d, so the other pods need other nodes of NVLink clique %s",
				cd.Name, cd.Spec.NumNodes, nodes, clique)
		default:
			continue
		}
		results[i].Reasons = append([]string{why}, results[i].Reasons...)
	}
}

// domainOf is the domain whose channel template made the claim named claim ("<template>-<n>"),
// nil when none did.
func domainOf(domains []*cdv1beta1.ComputeDomain, claim string) *cdv1beta1.ComputeDomain {
	for _, cd := range domains {
		if cd.Spec.Channel == nil {
			continue
		}
		n, ok := strings.CutPrefix(claim, cd.Spec.Channel.ResourceClaimTemplate.Name+"-")
		if ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return cd
		}
	}
	return nil
}

// nodeCount is how many nodes the machine's slices make (Checker.nodes): one at least.
func nodeCount(rs []*resourceapi.ResourceSlice) int {
	names := map[string]bool{}
	for _, s := range rs {
		if s != nil && s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
			names[*s.Spec.NodeName] = true
		}
	}
	return max(len(names), 1)
}
