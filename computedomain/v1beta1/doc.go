// Package v1beta1 is the ComputeDomain API, resource.nvidia.com/v1beta1: a namespaced custom
// resource that asks for a multi-node NVLink (MNNVL) domain for one distributed job. Its
// controller runs IMEX daemons on the job's nodes and makes a ResourceClaimTemplate whose claims
// give each pod an IMEX channel, so that GPUs on several nodes of one NVLink domain (a GB200
// NVL72 rack) can import each other's memory.
//
// The kind and its spec are NVIDIA's, so manifests written for NVIDIA's compute-domain driver
// apply unchanged:
//
//	apiVersion: resource.nvidia.com/v1beta1
//	kind: ComputeDomain
//	metadata:
//	  name: training-domain
//	spec:
//	  numNodes: 4
//	  channel:
//	    resourceClaimTemplate:
//	      name: training-domain-channel
//	    allocationMode: Single          # or All
//
// The status is this project's: whether the domain is ready, and each node's IMEX daemon with
// its address and NVLink clique.
//
// The CustomResourceDefinition is generated from these types (make generate:
// controller-gen, into deployments/crds), and so are the DeepCopy methods (deepcopy-gen).
//
// +k8s:deepcopy-gen=package
// +kubebuilder:object:generate=false
// +groupName=resource.nvidia.com
package v1beta1
