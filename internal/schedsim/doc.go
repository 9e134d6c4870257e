// Package schedsim allocates ResourceClaims against ResourceSlices with the Kubernetes
// scheduler's own allocator (k8s.io/dynamic-resource-allocation/structured), the way
// kube-scheduler's DRA plugin does for one node: claims are defaulted as the API server would,
// results are recorded so later claims see earlier allocations, and features are enabled as in a
// Kubernetes 1.36 scheduler. It backs the integration tests, benchmarks and the reference
// driver's demo; it is not a scheduler.
package schedsim
