package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Phase is where a claim stands in its prepare/unprepare life cycle. The plugin core records a
// phase before it touches hardware and advances it after, so that reconciliation after a crash
// knows whether to finish or roll back.
type Phase string

const (
	// PrepareStarted means prepare began and may have done part of its work (MIG instances
	// created, host actions applied, CDI spec written). Devices lists what was done so far; after
	// a crash the claim is rolled back from that list.
	PrepareStarted Phase = "PrepareStarted"
	// PrepareCompleted means every device of the claim is ready and its CDI device IDs were, or
	// are about to be, returned to kubelet.
	PrepareCompleted Phase = "PrepareCompleted"
	// UnprepareStarted means unprepare began; after a crash it is finished, never reverted.
	UnprepareStarted Phase = "UnprepareStarted"
)

// Valid reports whether p is one of the phases defined by this package.
func (p Phase) Valid() bool {
	switch p {
	case PrepareStarted, PrepareCompleted, UnprepareStarted:
		return true
	}
	return false
}

// State is the whole checkpoint: every claim the plugin has prepared or is preparing on this node.
type State struct {
	// Claims maps a ResourceClaim UID to its state. The key equals ClaimState.UID.
	Claims map[string]ClaimState `json:"claims"`
}

// ClaimState is the recorded state of one ResourceClaim on this node.
type ClaimState struct {
	// UID is the ResourceClaim's metadata.uid; the key of the claim in State.Claims.
	UID string `json:"uid"`
	// Namespace is the claim's namespace, for logs and API lookups during reconciliation.
	Namespace string `json:"namespace"`
	// Name is the claim's name, for logs and API lookups during reconciliation.
	Name string `json:"name"`
	// Phase is the claim's life-cycle phase.
	Phase Phase `json:"phase"`
	// Devices are the allocated devices of our driver, in allocation-result order. While Phase is
	// PrepareStarted it holds the devices whose preparation has begun, each with the undo
	// information recorded so far.
	Devices []PreparedDevice `json:"devices,omitempty"`
	// BootID is the kernel boot ID current when the claim was last changed. Store stamps it on
	// every change. A claim whose BootID differs from Store.BootID was prepared before a reboot:
	// its dynamic MIG instances, host settings and tmpfs CDI specs are gone and must be rebuilt or
	// forgotten. Empty for claims migrated from version 1, which did not record it: unknown, not
	// an earlier boot (a driver upgrade does not reboot the node).
	BootID string `json:"bootID,omitempty"`
	// UpdatedAt is when the claim was last changed, stamped by Store in UTC. Zero for claims
	// migrated from version 1.
	UpdatedAt time.Time `json:"updatedAt"`
	// Recovered is set for a claim rebuilt from what was on the node (its CDI spec, MIG
	// instances, MPS daemon) because the checkpoint could not be trusted. Its request names and
	// its namespace and name are unknown until kubelet prepares it again.
	Recovered bool `json:"recovered,omitempty"`
}

// PreparedDevice is one device of a claim and everything needed to undo its preparation or to
// recreate its CDI spec without asking the API server.
type PreparedDevice struct {
	// Request is the name of the claim request the device was allocated for ("gpu", or
	// "gpu/sub" for a subrequest of a request with firstAvailable).
	Request string `json:"request"`
	// Pool is the ResourceSlice pool of the device.
	Pool string `json:"pool"`
	// Device is the DRA device name published in the ResourceSlice ("gpu-0", "gpu-0-mig-1g5gb-0").
	Device string `json:"device"`
	// CDIDeviceIDs are the fully qualified CDI device IDs returned to kubelet for this device.
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// GPUUUID is the UUID of the physical GPU the device lives on (the parent GPU for MIG), so
	// that rollback finds the hardware even if device names or indexes changed.
	GPUUUID string `json:"gpuUUID,omitempty"`
	// MIG is set when the device is a MIG device.
	MIG *MIGInstance `json:"mig,omitempty"`
	// AdminAccess is set for a device allocated with admin access: the claim only looks at a
	// device others may use, so it owns nothing (no instance it may destroy, no host setting).
	AdminAccess bool `json:"adminAccess,omitempty"`
	// Sharing is the sharing package's undo record for this device (time-slice applied, MPS
	// daemon started, compute mode changed...), opaque to the checkpoint. It must be valid JSON;
	// Store stores it compacted. Nil when no host action was applied.
	Sharing json.RawMessage `json:"sharing,omitempty"`
	// Edits are the container edits of the device's CDI device (a JSON specs.ContainerEdits),
	// recorded by plugins whose edits come from the driver rather than from the hardware
	// identity recorded here (package draplugin/exclusive), so that a lost spec can be written
	// again. Like Sharing it must be valid JSON and is stored compacted; nil when not recorded.
	Edits json.RawMessage `json:"edits,omitempty"`
	// VFIO is set when the device is a GPU passed through to a virtual machine: its IOMMU group
	// is (or is being) bound to vfio-pci, and undoing the device gives it back to the GPU driver.
	VFIO *VFIOBinding `json:"vfio,omitempty"`
}

// VFIOBinding records a GPU bound to vfio-pci for a claim: enough to unbind it, to write its CDI
// spec again, and to keep publishing it while NVML, which no longer sees it, does not.
type VFIOBinding struct {
	// PCIAddress is the GPU's canonical PCI address ("0000:07:00.0").
	PCIAddress string `json:"pciAddress"`
	// IOMMUGroup is the GPU's IOMMU group: its device node is /dev/vfio/<IOMMUGroup>.
	IOMMUGroup int `json:"iommuGroup"`
	// ResourceName is the name the CDI spec's PCI_RESOURCE_<name> variable carries
	// ("nvidia.com/A100_SXM4_40GB").
	ResourceName string `json:"resourceName,omitempty"`
	// Major is the major number of the group's device node, once bound (zero before).
	Major int64 `json:"major,omitempty"`
	// Minor is the minor number of the group's device node, once bound.
	Minor int64 `json:"minor,omitempty"`
	// GPU is the GPU's inventory entry (a JSON gpu.GPU) as it was enumerated before the bind.
	GPU json.RawMessage `json:"gpu,omitempty"`
}

// MIGInstance identifies one MIG device precisely enough to destroy it or, after a reboot,
// recreate it at the same place.
type MIGInstance struct {
	// ParentUUID is the UUID of the physical GPU holding the instance.
	ParentUUID string `json:"parentUUID"`
	// Profile is the canonical profile name ("1g.5gb", "1c.3g.20gb"), for humans and logs.
	Profile string `json:"profile,omitempty"`
	// GIProfileID is the NVML GPU-instance profile ID (GpuInstanceProfileInfo.Id), not the
	// profile enum.
	GIProfileID int `json:"giProfileID"`
	// CIProfileID is the NVML compute-instance profile ID (ComputeInstanceProfileInfo.Id), not
	// the profile enum.
	CIProfileID int `json:"ciProfileID"`
	// Placement is the GPU instance's placement in memory slices.
	Placement Placement `json:"placement"`
	// GIID is the GPU-instance ID NVML assigned, meaningful only within the boot recorded in
	// ClaimState.BootID.
	GIID int `json:"giID"`
	// CIID is the compute-instance ID NVML assigned, within the same boot.
	CIID int `json:"ciID"`
	// UUID is the MIG device UUID ("MIG-..."), empty until known.
	UUID string `json:"uuid,omitempty"`
	// Created is true when this driver created the instance for the claim (dynamic MIG) and must
	// destroy it on unprepare; false when the instance pre-existed (static MIG) and must be kept.
	Created bool `json:"created"`
}

// Placement is where a GPU instance sits on its GPU, in memory slices as NVML counts them.
type Placement struct {
	// Start is the index of the first memory slice.
	Start int `json:"start"`
	// Size is the number of memory slices.
	Size int `json:"size"`
}

// Clone returns a deep copy of s; the copy shares no memory with s.
func (s State) Clone() State {
	out := State{Claims: make(map[string]ClaimState, len(s.Claims))}
	for uid, c := range s.Claims {
		out.Claims[uid] = c.Clone()
	}
	return out
}

// shallowClone returns a copy of s whose claims map is new but whose claims are s's: safe as
// long as neither changes a claim in place (the Store never does).
func (s State) shallowClone() State {
	out := State{Claims: make(map[string]ClaimState, len(s.Claims)+1)}
	maps.Copy(out.Claims, s.Claims)
	return out
}

// Clone returns a deep copy of c.
func (c ClaimState) Clone() ClaimState {
	out := c
	if c.Devices != nil {
		out.Devices = make([]PreparedDevice, len(c.Devices))
		for i, d := range c.Devices {
			out.Devices[i] = d.Clone()
		}
	}
	return out
}

// Clone returns a deep copy of d.
func (d PreparedDevice) Clone() PreparedDevice {
	out := d
	out.CDIDeviceIDs = slices.Clone(d.CDIDeviceIDs)
	out.Sharing = slices.Clone(d.Sharing)
	out.Edits = slices.Clone(d.Edits)
	if d.MIG != nil {
		m := *d.MIG
		out.MIG = &m
	}
	if d.VFIO != nil {
		v := *d.VFIO
		v.GPU = slices.Clone(d.VFIO.GPU)
		out.VFIO = &v
	}
	return out
}

// Validate checks the invariants every stored state satisfies and names the offending field.
func (s State) Validate() error {
	for _, uid := range slices.Sorted(maps.Keys(s.Claims)) {
		if err := validateClaim(uid, s.Claims[uid]); err != nil {
			return err
		}
	}
	return nil
}

// validateClaim checks the claim stored under uid.
func validateClaim(uid string, c ClaimState) error {
	path := "claims[" + strconv.Quote(uid) + "]"
	if uid == "" {
		return fmt.Errorf("%s: empty claim UID", path)
	}
	if c.UID != uid {
		return fmt.Errorf("%s.uid: %q does not match its key", path, c.UID)
	}
	if !c.Phase.Valid() {
		return fmt.Errorf("%s.phase: %q is not one of %s, %s, %s", path, c.Phase,
			PrepareStarted, PrepareCompleted, UnprepareStarted)
	}
	for i, d := range c.Devices {
		dpath := path + ".devices[" + strconv.Itoa(i) + "]"
		if d.Device == "" {
			return fmt.Errorf("%s.device: empty device name", dpath)
		}
		if d.MIG != nil && d.MIG.ParentUUID == "" {
			return fmt.Errorf("%s.mig.parentUUID: empty", dpath)
		}
		if d.Sharing != nil && !json.Valid(d.Sharing) {
			return fmt.Errorf("%s.sharing: not valid JSON", dpath)
		}
		if d.Edits != nil && !json.Valid(d.Edits) {
			return fmt.Errorf("%s.edits: not valid JSON", dpath)
		}
		if v := d.VFIO; v != nil && (v.PCIAddress == "" || v.IOMMUGroup < 0 || (v.GPU != nil && !json.Valid(v.GPU))) {
			return fmt.Errorf("%s.vfio: want a PCI address, an IOMMU group >= 0 and the GPU as valid JSON", dpath)
		}
	}
	return nil
}

// normalize makes the in-memory form of s identical to what decoding its JSON encoding yields:
// empty slices become nil, Sharing and Edits are compacted and a JSON null becomes nil. It must
// run after Validate.
func (s *State) normalize() {
	if s.Claims == nil {
		s.Claims = map[string]ClaimState{}
	}
	for uid, c := range s.Claims {
		s.Claims[uid] = normalizeClaim(c)
	}
}

// normalizeClaim is normalize for one claim that validateClaim accepted.
func normalizeClaim(c ClaimState) ClaimState {
	if len(c.Devices) == 0 {
		c.Devices = nil
	}
	for i := range c.Devices {
		d := &c.Devices[i]
		if len(d.CDIDeviceIDs) == 0 {
			d.CDIDeviceIDs = nil
		}
		d.Sharing = compactJSON(d.Sharing)
		d.Edits = compactJSON(d.Edits)
		if d.VFIO != nil {
			v := *d.VFIO
			v.GPU = compactJSON(v.GPU)
			d.VFIO = &v
		}
	}
	return c
}

// compactJSON is raw, valid JSON, compacted; nil for nil, empty or null.
func compactJSON(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err == nil {
		raw = buf.Bytes()
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}
