// Package workload reads Kubernetes manifests of GPU workloads (ResourceClaims,
// ResourceClaimTemplates, DeviceClasses, and the Pods, Deployments and Jobs that use them) and
// expands them into the ResourceClaims the API server would hold: one claim per pod (and
// replica) for every template reference, as the resourceclaim controller creates them. It backs
// the allocator integration tests and the reference driver's demo.
package workload
