package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kinds of the opaque device configurations the controller puts into the claim templates
// it makes, in apiVersion resource.nvidia.com/v1beta1 (NVIDIA's names and fields).
const (
	// ChannelConfigKind is the kind of ComputeDomainChannelConfig.
	ChannelConfigKind = "ComputeDomainChannelConfig"
	// DaemonConfigKind is the kind of ComputeDomainDaemonConfig.
	DaemonConfigKind = "ComputeDomainDaemonConfig"
)

// ComputeDomainChannelConfig is the opaque configuration of a workload's channel claim: which
// domain the channel belongs to and how many channels the claim's containers get. The
// controller writes it into the domain's channel ResourceClaimTemplate; users do not.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ComputeDomainChannelConfig struct {
	metav1.TypeMeta `json:",inline"`

	// DomainID is the UID of the ComputeDomain.
	DomainID string `json:"domainID"`
	// AllocationMode is Single (channel 0 only, the default) or All (every channel of the node).
	// +optional
	AllocationMode AllocationMode `json:"allocationMode,omitempty"`
}

// ComputeDomainDaemonConfig is the opaque configuration of an IMEX daemon pod's claim: which
// domain the node's daemon serves. The controller writes it into the daemon ResourceClaimTemplate.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ComputeDomainDaemonConfig struct {
	metav1.TypeMeta `json:",inline"`

	// DomainID is the UID of the ComputeDomain.
	DomainID string `json:"domainID"`
}
