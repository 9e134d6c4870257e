package claimstate

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/checkpoint"
)

// ClaimRef names a claim in errors and reports: "namespace/name (uid)".
func ClaimRef(namespace, name string, uid types.UID) string {
	return fmt.Sprintf("%s/%s (%s)", namespace, name, uid)
}

// Ref names a recorded claim as ClaimRef does.
func Ref(c checkpoint.ClaimState) string { return ClaimRef(c.Namespace, c.Name, types.UID(c.UID)) }

// SameAllocation checks that a prepared claim is still allocated the devices it was prepared
// with (results are the claim's allocation results of this plugin): a claim re-allocated without
// being unprepared must not be answered from the checkpoint.
func SameAllocation(st checkpoint.ClaimState, results []resourceapi.DeviceRequestAllocationResult) error {
	key := func(request, pool, device string) string { return request + "/" + pool + "/" + device }
	var recorded, now []string
	for _, d := range st.Devices {
		recorded = append(recorded, key(d.Request, d.Pool, d.Device))
	}
	for _, r := range results {
		now = append(now, key(r.Request, r.Pool, r.Device))
	}
	slices.Sort(recorded)
	slices.Sort(now)
	if !slices.Equal(recorded, now) {
		return fmt.Errorf("the claim was prepared on this node with %v (request/pool/device) but is now allocated %v; it must be unprepared before it is prepared again", recorded, now)
	}
	return nil
}

// CompleteRecovered fills in what the CDI spec of a recovered claim (checkpoint.ClaimState
// Recovered) could not say, request names, namespace and name, from the claim kubelet prepares
// again and its allocation results of this plugin, and checks that the allocation is the same.
// The caller records the completed entry and answers from it.
func CompleteRecovered(st checkpoint.ClaimState, claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult) (checkpoint.ClaimState, error) {
	st = st.Clone()
	used := make([]bool, len(results))
	for i := range st.Devices {
		j := -1
		for k, r := range results {
			if !used[k] && r.Device == st.Devices[i].Device {
				j = k
				break
			}
		}
		if j < 0 {
			return st, fmt.Errorf("device %s: the claim was recovered from its CDI spec with this device, but is not allocated it now; it must be unprepared first", st.Devices[i].Device)
		}
		used[j] = true
		st.Devices[i].Request = results[j].Request
	}
	st.Namespace, st.Name, st.Recovered = claim.Namespace, claim.Name, false
	return st, SameAllocation(st, results)
}

// ShareIDs maps request and device (joined by NUL) to the share ID the allocation gave the
// device, for the driver's devices allocated a share of their capacity.
func ShareIDs(claim *resourceapi.ResourceClaim, driverName string) map[string]*types.UID {
	shareIDs := map[string]*types.UID{}
	if claim.Status.Allocation == nil {
		return shareIDs
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == driverName && r.ShareID != nil {
			id := *r.ShareID
			shareIDs[r.Request+"\x00"+r.Device] = &id
		}
	}
	return shareIDs
}

// Result is the prepare result of a prepared claim, rebuilt from its checkpoint entry, with the
// share IDs of ShareIDs.
func Result(st checkpoint.ClaimState, shareIDs map[string]*types.UID) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(st.Devices))
	for _, d := range st.Devices {
		out = append(out, kubeletplugin.Device{
			Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device,
			CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs), ShareID: shareIDs[d.Request+"\x00"+d.Device],
		})
	}
	return out
}
