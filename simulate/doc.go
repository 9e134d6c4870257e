// Package simulate answers "would the scheduler allocate these claims on this node?" offline,
// with the Kubernetes scheduler's own allocator (k8s.io/dynamic-resource-allocation/structured).
//
// # Allocating
//
// A Simulator holds one node's ResourceSlices and DeviceClasses. Allocate defaults a claim as
// the API server would, allocates it the way kube-scheduler's DRA plugin does for that node, and
// records the result so later claims see earlier allocations; Release gives the devices back.
// Features are those a Kubernetes 1.37 scheduler enables by default (DefaultFeatures), unless
// WithFeatures says otherwise. It is not a scheduler: there is one node, no pods and no
// binding.
//
// # Reading workloads
//
// LoadWorkload reads Kubernetes manifests of GPU workloads (ResourceClaims,
// ResourceClaimTemplates, DeviceClasses, and the Pods, Deployments and Jobs that use them) and
// expands them into the ResourceClaims the API server would hold: one claim per pod (and
// replica) for every template reference, as the resourceclaim controller creates them.
// Workload.Pods says which claims each pod uses; SkipOtherKinds skips Namespaces, ConfigMaps
// and other kinds instead of failing on them.
//
// The common path:
//
//	w, err := simulate.LoadWorkload(manifest, nil)
//	sim := simulate.New("node-1", classes, slices)
//	for _, c := range w.Claims {
//		allocated, err := sim.Allocate(ctx, c) // errors.Is(err, simulate.ErrUnschedulable) when it does not fit
//	}
package simulate
