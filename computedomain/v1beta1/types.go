package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The group and version of the ComputeDomain API, and its kind.
const (
	// GroupName is the API group, shared with the opaque device configurations
	// (sharing/v1beta1).
	GroupName = "resource.nvidia.com"
	// Version is the API version.
	Version = "v1beta1"
	// Kind is the ComputeDomain kind.
	Kind = "ComputeDomain"
)

// AllocationMode says which IMEX channels a domain's channel claim asks for.
// +kubebuilder:validation:Enum=Single;All
type AllocationMode string

// The allocation modes.
const (
	// AllocationModeSingle gives each pod's claim one IMEX channel (channel 0): enough for one
	// job per domain, and the default.
	AllocationModeSingle AllocationMode = "Single"
	// AllocationModeAll gives each pod's claim every IMEX channel of its node.
	AllocationModeAll AllocationMode = "All"
)

// ComputeDomain asks for a multi-node NVLink domain for one distributed job: IMEX daemons on
// its nodes and a ResourceClaimTemplate for the job's IMEX channels.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=cd
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ComputeDomain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the job asks for.
	Spec ComputeDomainSpec `json:"spec"`
	// Status is what the controller and the nodes' IMEX daemons report.
	// +optional
	Status ComputeDomainStatus `json:"status,omitempty"`
}

// ComputeDomainSpec is what a job asks of its domain.
type ComputeDomainSpec struct {
	// NumNodes is how many nodes the job spans: the domain is Ready once that many nodes' IMEX
	// daemons are. 0 leaves readiness to the channel claims alone (NVIDIA deprecates the field
	// in that sense; it is kept for manifests that set it).
	// +kubebuilder:validation:Minimum=0
	// +optional
	NumNodes int `json:"numNodes"`
	// Channel asks for a ResourceClaimTemplate of IMEX channels that the job's pods name.
	// +optional
	Channel *ComputeDomainChannelSpec `json:"channel,omitempty"`
}

// ComputeDomainChannelSpec names the ResourceClaimTemplate the controller makes.
type ComputeDomainChannelSpec struct {
	// ResourceClaimTemplate is the template the controller creates in the domain's namespace.
	ResourceClaimTemplate ResourceClaimTemplateReference `json:"resourceClaimTemplate"`
	// AllocationMode is Single (one channel per claim, the default) or All.
	// +kubebuilder:default=Single
	// +optional
	AllocationMode AllocationMode `json:"allocationMode,omitempty"`
}

// ResourceClaimTemplateReference names a ResourceClaimTemplate in the domain's namespace.
type ResourceClaimTemplateReference struct {
	// Name is the template's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Status values of a domain and of a node in it.
const (
	// StatusReady: every node the domain needs runs a ready IMEX daemon.
	StatusReady = "Ready"
	// StatusNotReady: some node the domain needs has no ready IMEX daemon yet.
	StatusNotReady = "NotReady"
)

// ComputeDomainStatus is what the controller reports.
type ComputeDomainStatus struct {
	// Status is Ready or NotReady.
	// +kubebuilder:validation:Enum=Ready;NotReady
	// +kubebuilder:default=NotReady
	// +optional
	Status string `json:"status,omitempty"`
	// CliqueID is the NVLink clique ("<cluster UUID>.<clique ID>") the controller chose for the
	// domain: its channel claim template selects channels of that clique only, so the
	// scheduler puts every pod of the job on nodes of one NVLink domain. Empty until chosen.
	// +optional
	CliqueID string `json:"cliqueID,omitempty"`
	// Nodes are the nodes whose IMEX daemons belong to the domain.
	// +listType=map
	// +listMapKey=name
	// +optional
	Nodes []ComputeDomainNode `json:"nodes,omitempty"`
}

// ComputeDomainNode is one node's IMEX daemon in a domain.
type ComputeDomainNode struct {
	// Name is the node's name.
	Name string `json:"name"`
	// IPAddress is the address the node's IMEX daemon listens on for its peers.
	IPAddress string `json:"ipAddress"`
	// CliqueID is the node's NVLink clique, "<cluster UUID>.<clique ID>" from the GPUs' fabric
	// info: nodes of one domain must share it.
	CliqueID string `json:"cliqueID"`
	// Index is the node's position among the domain's nodes of its clique, by name; the
	// controller sets it, and the node's IMEX daemon, which creates the entry, leaves it out.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Index int `json:"index,omitempty"`
	// Status is Ready once the node's IMEX daemon reports its peers connected.
	// +kubebuilder:validation:Enum=Ready;NotReady
	Status string `json:"status"`
}

// ComputeDomainList is a list of ComputeDomains.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ComputeDomainList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the domains.
	Items []ComputeDomain `json:"items"`
}
