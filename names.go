package gpudra

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

const (
	// DefaultDriverName is the DRA driver name manifests written for NVIDIA's DRA driver expect.
	DefaultDriverName = "gpu.nvidia.com"
	// GPUDeviceClassName selects full GPUs.
	GPUDeviceClassName = "gpu.nvidia.com"
	// MIGDeviceClassName selects MIG devices.
	MIGDeviceClassName = "mig.nvidia.com"
	// DeviceTypeGPU is the value of the "type" attribute of a full GPU.
	DeviceTypeGPU = "gpu"
	// DeviceTypeMIG is the value of the "type" attribute of a MIG device.
	DeviceTypeMIG = "mig"
)

// GPUDeviceName is the DRA device name of a full GPU. It uses the minor number, which is stable
// for the same hardware across driver restarts, unlike the NVML index.
func GPUDeviceName(minor int) string { return "gpu-" + strconv.Itoa(minor) }

// MIGDeviceName is the DRA device name of the MIG device n describes:
// "gpu-<ParentMinor>-mig-<profile>-<GIProfileID>-<PlacementStart>[-<CISuffix>]". The same
// placement has the same name whether it is published as an existing (static) MIG device or as a
// dynamic partition. ParseMIGDeviceName reads a name back into a MIGName; MIGDeviceNameOf names
// an enumerated gpu.MIGDevice.
//
// The profile is lowered to a DNS label: dots are dropped and "+" becomes "-"
// ("1g.10gb+me" → "1g10gb-me"), so a Profile already in that form names the same device.
func MIGDeviceName(n MIGName) string {
	name := fmt.Sprintf("gpu-%d-mig-%s-%d-%d", n.ParentMinor, profileLabel(n.Profile), n.GIProfileID, n.PlacementStart)
	if n.CISuffix != "" {
		name += "-" + n.CISuffix
	}
	return name
}

// profileLabel lowers a MIG profile name to DNS-label characters: dots dropped, "+" and ","
// become "-" ("1g.10gb+me" → "1g10gb-me").
func profileLabel(profile string) string {
	// strings.Map, not a strings.Replacer built per call: this runs for every MIG device and
	// partition of every slice build.
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return -1
		case '+', ',':
			return '-'
		}
		return unicode.ToLower(r)
	}, profile)
}

var migNameRE = regexp.MustCompile(`^gpu-(\d+)-mig-([a-z0-9-]+?)-(\d+)-(\d+)(?:-(ci\d+))?$`)

// MIGName is a MIG device name split into its parts: what MIGDeviceName joins and
// ParseMIGDeviceName splits.
type MIGName struct {
	// ParentMinor is the minor number of the physical GPU (/dev/nvidia<minor>).
	ParentMinor int
	// Profile is the GPU-instance profile: ParseMIGDeviceName returns its DNS-label form
	// ("1g10gb-me"); MIGDeviceName also takes the canonical name ("1g.10gb+me").
	Profile string
	// GIProfileID is NVML's GPU-instance profile ID (gpu.MIGDevice.GIProfileID), not the ID of
	// a GPU instance.
	GIProfileID int
	// PlacementStart is the first memory slice of the GPU instance's placement.
	PlacementStart int
	// CISuffix is empty for a compute instance that spans its whole GPU instance; otherwise it
	// tells apart the compute instances sharing one GPU instance ("ci1").
	CISuffix string
}

// ParseMIGDeviceName splits a name made by MIGDeviceName. It is used to roll back dynamic MIG
// devices from names alone, e.g. after a crash.
func ParseMIGDeviceName(name string) (MIGName, error) {
	m := migNameRE.FindStringSubmatch(name)
	if m == nil {
		return MIGName{}, fmt.Errorf("device name %q is not a MIG device name (want gpu-<minor>-mig-<profile>-<profileID>-<start>)", name)
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	return MIGName{ParentMinor: atoi(m[1]), Profile: m[2], GIProfileID: atoi(m[3]), PlacementStart: atoi(m[4]), CISuffix: m[5]}, nil
}
