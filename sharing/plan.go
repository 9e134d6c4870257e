package sharing

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/sharing/v1beta1"
)

const (
	// MPSPipeContainerPath is where containers see the MPS pipe directory.
	MPSPipeContainerPath = "/tmp/nvidia-mps"
	// MPSShmContainerPath is where containers see the MPS daemon's shared memory directory.
	MPSShmContainerPath = "/dev/shm"

	envPipeDir       = "CUDA_MPS_PIPE_DIRECTORY"
	envThreadPercent = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	envPinnedLimit   = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// plan is the host-independent outcome of a claim's configuration.
type plan struct {
	rec     *Record
	daemons []MPSDaemonSpec
	// planned are the UUIDs of devices that do not exist yet (Device.Planned).
	planned map[string]bool
}

// Plan resolves the claim's configuration (see Resolve) and computes, without changing the
// host, what Prepare would set up: per device the strategy, time slice, MPS daemon, pinned
// memory limit and container edits, and as Steps the host changes Prepare would make with the
// values they would replace, read now. Settings of a device marked Planned (which does not
// exist yet) are not among the steps: a rollback destroys that device. A caller that records
// the plan before Prepare can, after a crash in between, undo whatever Prepare changed with
// ResetPlan, restoring the values read here. The claim's UID must be a canonical UUID, as for
// Prepare.
func (m *Manager) Plan(ctx context.Context, claim *resourceapi.ResourceClaim, lookup DeviceLookup) (*Record, error) {
	if claim == nil || lookup == nil {
		return nil, errors.New("sharing: Plan needs a claim and a device lookup, got nil")
	}
	if err := validateClaimUID(claim); err != nil {
		return nil, err
	}
	p, err := m.plan(ctx, claim, lookup)
	if err != nil {
		return nil, err
	}
	unlock := m.locks.lock(physicalGPUs(p.rec))
	defer unlock()
	if err := m.apply(ctx, p, true); err != nil {
		return nil, fmt.Errorf("claim %s: %w", ClaimString(claim), err)
	}
	return p.rec, nil
}

// validateClaimUID refuses a claim UID that is not a canonical UUID, as Kubernetes makes
// them, before it names anything: the UID is the ID of the claim's own MPS daemon and the name
// of that daemon's directory under the MPS root, so "../x" or "a/b" would reach outside it.
// The rule is package cdi's, which puts the UID in CDI spec file names and device IDs.
func validateClaimUID(claim *resourceapi.ResourceClaim) error {
	if err := cdi.ValidateClaimUID(string(claim.UID)); err != nil {
		return fmt.Errorf("sharing: claim %s/%s: metadata.uid: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

func (m *Manager) plan(ctx context.Context, claim *resourceapi.ResourceClaim, lookup DeviceLookup) (*plan, error) {
	logger := klog.FromContext(ctx)
	dcs, err := m.Resolve(claim, lookup)
	if err != nil {
		return nil, err
	}
	rec := &Record{Version: RecordVersion, ClaimUID: claim.UID, Namespace: claim.Namespace, Name: claim.Name,
		Devices: make([]PreparedDevice, len(dcs))}
	cs := ClaimString(claim)
	planned := map[string]bool{}
	for _, dc := range dcs {
		if dc.Device.Planned {
			planned[dc.Device.UUID] = true
		}
	}

	// Index of each device among the devices its config entry applies to, for
	// defaultPerDevicePinnedMemoryLimit keys that are indices.
	groupIndex := make([]int, len(dcs))
	groupSize := map[int]int{}
	for i, dc := range dcs {
		groupIndex[i] = groupSize[dc.ConfigIndex]
		groupSize[dc.ConfigIndex]++
	}

	var mpsDevices []int
	for i, dc := range dcs {
		pd := &rec.Devices[i]
		*pd = PreparedDevice{Request: dc.Request, Pool: dc.Pool, Device: dc.DeviceName, UUID: dc.Device.UUID,
			ParentUUID: dc.Device.ParentUUID, Strategy: dc.Config.Strategy(), ShareID: dc.ShareID, AdminAccess: dc.AdminAccess}
		where := fmt.Sprintf("claim %s: device %s of request %q, %s", cs, dc.Device, dc.Request, dc.Source(claim))
		if dc.AdminAccess {
			logger.V(2).Info("Admin access device gets no sharing setup", "claim", klog.KObj(claim), "device", dc.DeviceName, "request", dc.Request)
			pd.Strategy = v1beta1.StrategyExclusive
			continue
		}
		fractional := dc.AllocatedMemoryBytes > 0
		switch pd.Strategy {
		case v1beta1.StrategyTimeSlicing:
			if fractional {
				return nil, fmt.Errorf("%s: the device was allocated %d bytes of its memory, which TimeSlicing cannot enforce; use strategy MPS or no sharing config", where, dc.AllocatedMemoryBytes)
			}
			gc, ok := dc.Config.(*v1beta1.GpuConfig)
			if !ok || dc.Device.IsMIG {
				// Processes on a MIG device are time-sliced already; the interval belongs to the
				// physical GPU, so there is nothing to set.
				continue
			}
			v := gc.Interval().Int()
			pd.TimeSlice = &v
		case v1beta1.StrategyExclusive:
			if fractional {
				logger.V(2).Info("Device allocated a memory fraction runs under MPS to enforce it", "claim", klog.KObj(claim),
					"device", dc.DeviceName, "allocatedBytes", dc.AllocatedMemoryBytes)
				pd.Strategy = v1beta1.StrategyMPS
				mpsDevices = append(mpsDevices, i)
			}
		case v1beta1.StrategyMPS:
			mpsDevices = append(mpsDevices, i)
		}
		if pd.Strategy != v1beta1.StrategyMPS {
			continue
		}
		limit, err := pinnedLimit(dc, groupIndex[i], dcs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		pd.PinnedMemoryLimitMiB = limit
	}

	daemons, err := m.planDaemons(claim, dcs, rec, mpsDevices)
	if err != nil {
		return nil, err
	}
	return &plan{rec: rec, daemons: daemons, planned: planned}, nil
}

// pinnedLimit is the device's pinned memory limit in MiB (0: none): the config's per-device
// entry (by UUID or by index among the devices of the config entry), else its default, capped
// by an allocated memory fraction.
func pinnedLimit(dc ResolvedDevice, index int, all []ResolvedDevice) (int64, error) {
	var limit int64
	if mps := dc.Config.MPS(); mps != nil {
		if mps.DefaultPinnedDeviceMemoryLimit != nil {
			v, err := v1beta1.LimitMiB(*mps.DefaultPinnedDeviceMemoryLimit)
			if err != nil {
				return 0, fmt.Errorf("defaultPinnedDeviceMemoryLimit: %w", err)
			}
			limit = v
		}
		var byKey string
		for _, k := range sortedKeys(mps.DefaultPerDevicePinnedMemoryLimit) {
			uuid, idx, err := v1beta1.ParseDeviceKey(k)
			if err != nil {
				return 0, fmt.Errorf("defaultPerDevicePinnedMemoryLimit[%s]: %w", k, err)
			}
			if uuid == "" && idx >= countConfig(all, dc.ConfigIndex) {
				return 0, fmt.Errorf("defaultPerDevicePinnedMemoryLimit[%s]: the config applies to %d device(s), indices 0..%d",
					k, countConfig(all, dc.ConfigIndex), countConfig(all, dc.ConfigIndex)-1)
			}
			if uuid != "" && !configHasUUID(all, dc.ConfigIndex, uuid) {
				return 0, fmt.Errorf("defaultPerDevicePinnedMemoryLimit[%s]: no device with that UUID is allocated under this config", k)
			}
			if uuid != dc.Device.UUID && (uuid != "" || idx != index) {
				continue
			}
			if byKey != "" {
				return 0, fmt.Errorf("defaultPerDevicePinnedMemoryLimit: keys %q and %q both name this device; keep one", byKey, k)
			}
			byKey = k
			v, err := v1beta1.LimitMiB(mps.DefaultPerDevicePinnedMemoryLimit[k])
			if err != nil {
				return 0, fmt.Errorf("defaultPerDevicePinnedMemoryLimit[%s]: %w", k, err)
			}
			limit = v
		}
	}
	if dc.AllocatedMemoryBytes > 0 {
		alloc := dc.AllocatedMemoryBytes >> 20
		if alloc < 1 {
			return 0, fmt.Errorf("the device was allocated %d bytes of memory; MPS limits start at 1Mi", dc.AllocatedMemoryBytes)
		}
		if limit > alloc {
			return 0, fmt.Errorf("pinned memory limit %dMi exceeds the %dMi of device memory allocated to the claim", limit, alloc)
		}
		if limit == 0 {
			limit = alloc
		}
	}
	return limit, nil
}

func countConfig(all []ResolvedDevice, idx int) int {
	n := 0
	for _, d := range all {
		if d.ConfigIndex == idx {
			n++
		}
	}
	return n
}

func configHasUUID(all []ResolvedDevice, idx int, uuid string) bool {
	for _, d := range all {
		if d.ConfigIndex == idx && d.Device.UUID == uuid {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// planDaemons gives the claim's MPS devices one control daemon of the claim's own, named after
// the claim UID, whether the claim has its devices to itself or was allocated a share of them
// (a share ID): each claim's daemon spawns its own MPS server, which enforces the claim's
// pinned memory limits and thread percentage whatever its clients' environment says. Claims
// sharing a device therefore run one MPS server each on it, side by side in compute mode
// DEFAULT (see the package documentation).
func (m *Manager) planDaemons(claim *resourceapi.ResourceClaim, dcs []ResolvedDevice, rec *Record, mpsDevices []int) ([]MPSDaemonSpec, error) {
	if len(mpsDevices) == 0 {
		return nil, nil
	}
	pct, err := threadPercentage(claim, dcs, mpsDevices)
	if err != nil {
		return nil, err
	}
	var uuids []string
	for _, i := range mpsDevices {
		if !slices.Contains(uuids, dcs[i].Device.UUID) {
			uuids = append(uuids, dcs[i].Device.UUID)
		}
	}
	spec := m.daemonSpec(string(claim.UID), uuids)
	// Daemon-wide defaults: the claim's daemon applies them to every client.
	spec.ActiveThreadPercentage = pct
	if limits := ordinalLimits(spec.DeviceUUIDs, rec, mpsDevices); len(limits) > 0 {
		spec.PinnedMemoryLimits = limits
	}
	setMPSEdits(rec, mpsDevices, spec, pct)
	return []MPSDaemonSpec{spec}, nil
}

// threadPercentage is the defaultActiveThreadPercentage of the claim's MPS devices, which must
// agree: they share one daemon and one set of container edits.
func threadPercentage(claim *resourceapi.ResourceClaim, dcs []ResolvedDevice, mpsDevices []int) (*int, error) {
	var pct *int
	for n, i := range mpsDevices {
		var p *int
		if mps := dcs[i].Config.MPS(); mps != nil {
			p = mps.DefaultActiveThreadPercentage
		}
		if n == 0 {
			pct = p
			continue
		}
		if !equalPtr(p, pct) {
			first := mpsDevices[0]
			return nil, fmt.Errorf("claim %s: requests %q (%s) and %q (%s) set different MPS defaultActiveThreadPercentage (%s and %s), but the claim's devices share one MPS control daemon; use one value",
				ClaimString(claim), dcs[first].Request, dcs[first].Source(claim), dcs[i].Request, dcs[i].Source(claim), ptrString(pct), ptrString(p))
		}
	}
	return pct, nil
}

// ordinalLimits maps the ordinal of each of the daemon's devices (its index in uuids, as CUDA
// numbers CUDA_VISIBLE_DEVICES) to its pinned memory limit. A device the claim lists several
// times gets the sum of the limits of its results (the memory the claim holds on it), or none
// when one of them has no limit.
func ordinalLimits(uuids []string, rec *Record, mpsDevices []int) map[string]string {
	out := map[string]string{}
	for n, uuid := range uuids {
		var sum int64
		for _, i := range mpsDevices {
			if rec.Devices[i].UUID != uuid {
				continue
			}
			l := rec.Devices[i].PinnedMemoryLimitMiB
			if l <= 0 {
				sum = 0
				break
			}
			sum += l
		}
		if sum > 0 {
			out[strconv.Itoa(n)] = v1beta1.FormatLimit(sum)
		}
	}
	return out
}

// setMPSEdits gives every MPS device of the claim the same container edits, so that a
// container that gets any subset of them sees one consistent daemon. The pinned memory limits
// are not among them: the claim's daemon enforces them (spec.PinnedMemoryLimits, sent with
// set_default_device_pinned_mem_limit before any client connects), so that nothing a tenant
// can edit bears on its share.
func setMPSEdits(rec *Record, mpsDevices []int, spec MPSDaemonSpec, pct *int) {
	env := []string{envPipeDir + "=" + MPSPipeContainerPath}
	if pct != nil {
		env = append(env, envThreadPercent+"="+strconv.Itoa(*pct))
	}
	for _, i := range mpsDevices {
		rec.Devices[i].MPSDaemonID = spec.ID
		rec.Devices[i].Edits = cdispec.ContainerEdits{
			Env: slices.Clone(env),
			Mounts: []*cdispec.Mount{
				{HostPath: spec.PipeDir, ContainerPath: MPSPipeContainerPath, Options: []string{"rw", "nosuid", "nodev", "bind"}},
				{HostPath: spec.ShmDir, ContainerPath: MPSShmContainerPath, Options: []string{"rw", "nosuid", "nodev", "bind"}},
			},
		}
	}
}

func (m *Manager) daemonSpec(id string, uuids []string) MPSDaemonSpec {
	dir := filepath.Join(m.mpsRoot, id)
	return MPSDaemonSpec{ID: id, DeviceUUIDs: uuids, Dir: dir,
		PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), ShmDir: filepath.Join(dir, "shm"),
		ShmSizeBytes: m.shmSize}
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func ptrString(p *int) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(*p)
}

// maxUnixSocketPath is the longest path a unix socket can be bound to or dialled at on Linux:
// sun_path holds 108 bytes, the terminating NUL included.
const maxUnixSocketPath = 107

// CheckMPSRoot fails when an MPS control daemon under root could not create its control socket:
// the longest one, <root>/<claim UID>/pipe/control, must fit the 107 bytes of a unix socket
// path. Call it before anything starts (serve does, for its --plugin-dir), so that a kubelet
// directory too deep for MPS is refused at start instead of failing the first MPS claim.
func CheckMPSRoot(root string) error {
	longest := filepath.Join(root, strings.Repeat("u", 36), "pipe", "control") // a claim UID is 36 bytes
	if len(longest) > maxUnixSocketPath {
		return fmt.Errorf("MPS root %s is too deep: an MPS control socket below it takes %d bytes, and a unix socket path holds at most %d (shorten the directory by %d bytes)",
			root, len(longest), maxUnixSocketPath, len(longest)-maxUnixSocketPath)
	}
	return nil
}
