package objects

import (
	"encoding/json"
	"errors"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/computedomain"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/topology"
)

// The devices a node's compute-domain plugin publishes.
const (
	// ChannelDevice is the node's default IMEX channel (type channel, id 0).
	ChannelDevice = "channel-0"
	// DaemonDevice is the node's IMEX daemon device (type daemon, id 0).
	DaemonDevice = "daemon-0"
)

// ChannelRequest is the request of a domain's channel claim template.
const ChannelRequest = "channel"

// ErrNoClique says that a node's GPUs put it in no NVLink clique: it has no GPUs, a GPU's fabric
// registration has not completed successfully, or its GPUs are in different cliques.
var ErrNoClique = errors.New("the node is in no NVLink clique")

// Clique returns the NVLink clique of a node, "<cluster UUID>.<clique ID>"
// (topology.Fabric.DomainID), when every one of its GPUs is registered in that clique. Otherwise
// it returns an error wrapping ErrNoClique that names the first GPU that keeps the node out.
func Clique(gpus []topology.GPU) (string, error) {
	if len(gpus) == 0 {
		return "", fmt.Errorf("%w: it has no GPUs", ErrNoClique)
	}
	var first *topology.Fabric
	for _, g := range gpus {
		switch {
		case g.Fabric == nil:
			return "", fmt.Errorf("%w: GPU %d (%s) has not completed its fabric registration successfully", ErrNoClique, g.Index, g.UUID)
		case first == nil:
			first = g.Fabric
		case *g.Fabric != *first:
			return "", fmt.Errorf("%w: GPU %d is in clique %s, GPU %d in %s", ErrNoClique, g.Index, g.Fabric.DomainID(), gpus[0].Index, first.DomainID())
		}
	}
	return first.DomainID(), nil
}

// Devices are the devices a node in clique publishes: ChannelDevice and DaemonDevice, with
// attributes type, id and cliqueID.
func Devices(clique string) []resourcev1.Device {
	return []resourcev1.Device{
		device(ChannelDevice, computedomain.TypeChannel, clique),
		device(DaemonDevice, computedomain.TypeDaemon, clique),
	}
}

func device(name, typ, clique string) resourcev1.Device {
	return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		computedomain.AttrType:     {StringValue: ptr.To(typ)},
		computedomain.AttrID:       {IntValue: ptr.To(int64(0))},
		computedomain.AttrCliqueID: {StringValue: ptr.To(clique)},
	}}
}

// Labels are the labels of everything the controller makes for the domain with uid.
func Labels(uid string) map[string]string {
	return map[string]string{computedomain.NodeLabel: uid}
}

// OwnerReference makes cd the controller owner of an object in its namespace.
func OwnerReference(cd *cdv1beta1.ComputeDomain) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         cdv1beta1.GroupVersion().String(),
		Kind:               cdv1beta1.Kind,
		Name:               cd.Name,
		UID:                cd.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// ClaimTemplate is a template of one exact request for a device of class in clique, configured
// with params (the driver's opaque configuration). The request spells out the allocation mode
// and count the API server would default (ExactCount, 1), so that it compares equal with the
// stored template.
func ClaimTemplate(meta metav1.ObjectMeta, request, class, clique string, params any) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: meta,
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{
				Name: request,
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, Selectors: cliqueSelector(clique),
					AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
			}},
			Config: opaque(params),
		}}},
	}
}

// ChannelTemplate is the ResourceClaimTemplate a domain's controller makes for cd's
// spec.channel (which must be set), in cd's namespace and owned by cd: one device of
// computedomain.ChannelDeviceClass in clique, configured with cd's allocation mode.
func ChannelTemplate(cd *cdv1beta1.ComputeDomain, clique string) *resourcev1.ResourceClaimTemplate {
	uid := string(cd.UID)
	meta := metav1.ObjectMeta{
		Name:            cd.Spec.Channel.ResourceClaimTemplate.Name,
		Namespace:       cd.Namespace,
		Labels:          Labels(uid),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(cd)},
	}
	params := cdv1beta1.ComputeDomainChannelConfig{
		TypeMeta:       metav1.TypeMeta{APIVersion: cdv1beta1.GroupVersion().String(), Kind: cdv1beta1.ChannelConfigKind},
		DomainID:       uid,
		AllocationMode: cd.Spec.Channel.AllocationMode,
	}
	return ClaimTemplate(meta, ChannelRequest, computedomain.ChannelDeviceClass, clique, params)
}

// cliqueSelector is the CEL selector of the devices of one clique.
func cliqueSelector(clique string) []resourcev1.DeviceSelector {
	expr := fmt.Sprintf("device.attributes['%s'].%s == '%s'", computedomain.DriverName, computedomain.AttrCliqueID, clique)
	return []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: expr}}}
}

// opaque is the opaque configuration of the driver with params as parameters. The configs
// are plain structs, so encoding them cannot fail.
func opaque(params any) []resourcev1.DeviceClaimConfiguration {
	raw, err := json.Marshal(params)
	if err != nil {
		panic(fmt.Sprintf("encode %T: %v", params, err))
	}
	return []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
		Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: computedomain.DriverName, Parameters: runtime.RawExtension{Raw: raw}},
	}}}
}
