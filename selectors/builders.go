package selectors

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/blang/semver/v4"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/selectors/internal/text"
)

// Builder writes CEL device selectors for one driver's devices, in the attribute and capacity
// names of the gpudra contract. Every expression it returns compiles; methods that take user
// input validate it and return an error saying what is wrong. The zero Builder is not useful:
// use For.
type Builder struct {
	driver string
}

// For returns a Builder for the driver's devices; an empty name means gpudra.DefaultDriverName.
// The driver name is also the attribute domain.
func For(driver string) Builder {
	if driver == "" {
		driver = gpudra.DefaultDriverName
	}
	return Builder{driver: driver}
}

// Driver is the driver name the Builder writes selectors for.
func (b Builder) Driver() string { return b.driver }

// attr is the CEL access to one of the driver's attributes.
func (b Builder) attr(name resourceapi.QualifiedName) string {
	return text.Attribute(b.driver, string(name))
}

// capacity is the CEL access to one of the driver's capacities.
func (b Builder) capacity(name resourceapi.QualifiedName) string {
	return fmt.Sprintf("device.capacity[%s].%s", text.Quote(b.driver), name)
}

// IsDriver selects every device of the driver.
func (b Builder) IsDriver() string { return "device.driver == " + text.Quote(b.driver) }

// Type selects the driver's devices of one type (gpudra.DeviceTypeGPU or gpudra.DeviceTypeMIG):
// the selector of the driver's DeviceClasses.
func (b Builder) Type(typ string) string {
	return b.IsDriver() + " && " + b.attr(gpudra.AttrType) + " == " + text.Quote(typ)
}

// GPU selects full GPUs.
func (b Builder) GPU() string { return b.Type(gpudra.DeviceTypeGPU) }

// MIG selects MIG devices.
func (b Builder) MIG() string { return b.Type(gpudra.DeviceTypeMIG) }

// Profiles selects MIG devices with one of the given profiles ("1g.5gb", "3g.40gb+me"). Profile
// names are checked for syntax, not against a GPU model; Linter does that for a machine.
func (b Builder) Profiles(profiles ...string) (string, error) {
	if len(profiles) == 0 {
		return "", fmt.Errorf("profiles: at least one MIG profile is required")
	}
	for i, p := range profiles {
		if _, err := mig.ParseProfile(p); err != nil {
			return "", fmt.Errorf("profiles[%d]: %w", i, err)
		}
	}
	return b.oneOf(gpudra.AttrProfile, profiles), nil
}

// Architecture selects devices of one of the given architectures, spelled as the driver
// publishes them ("Ampere", "Hopper", "Blackwell").
func (b Builder) Architecture(names ...string) (string, error) {
	if len(names) == 0 {
		return "", fmt.Errorf("architecture: at least one name is required")
	}
	for i, n := range names {
		if strings.TrimSpace(n) == "" {
			return "", fmt.Errorf("architecture[%d]: empty name", i)
		}
	}
	return b.oneOf(gpudra.AttrArchitecture, names), nil
}

func (b Builder) oneOf(name resourceapi.QualifiedName, values []string) string {
	if len(values) == 1 {
		return b.attr(name) + " == " + text.Quote(values[0])
	}
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = text.Quote(v)
	}
	return b.attr(name) + " in [" + strings.Join(q, ", ") + "]"
}

// ProductName selects devices whose product name matches a glob pattern, case-insensitively:
// "*" matches any run of characters, everything else literally ("*a100*80gb*" matches
// "NVIDIA A100-SXM4-80GB"). This is how gpu.resource.nvidia.com/v1alpha1 GpuClaimParameters
// matched productName.
func (b Builder) ProductName(glob string) (string, error) {
	if glob == "" {
		return "", fmt.Errorf("productName: empty pattern")
	}
	if !utf8.ValidString(glob) {
		return "", fmt.Errorf("productName: pattern %q is not valid UTF-8", glob)
	}
	return b.glob(gpudra.AttrProductName, glob), nil
}

// glob matches one of the driver's string attributes against a glob.
func (b Builder) glob(name resourceapi.QualifiedName, glob string) string {
	return text.Glob(b.attr(name), glob)
}

// MinComputeCapability selects devices with at least the given CUDA compute capability
// ("8.0", "7.5"; compared as versions, so "10.0" > "9.0").
func (b Builder) MinComputeCapability(v string) (string, error) {
	return b.VersionRange(gpudra.AttrCudaComputeCapability, v, "")
}

// DriverVersion selects devices whose NVIDIA driver version is at least min and below max;
// either bound may be empty.
func (b Builder) DriverVersion(min, max string) (string, error) {
	return b.VersionRange(gpudra.AttrDriverVersion, min, max)
}

// CUDADriverVersion selects devices whose CUDA driver version is at least min and below max;
// either bound may be empty.
func (b Builder) CUDADriverVersion(min, max string) (string, error) {
	return b.VersionRange(gpudra.AttrCudaDriverVersion, min, max)
}

// VersionRange selects devices whose version attribute is at least min (inclusive) and below
// max (exclusive); either bound may be empty, not both. Versions are normalized as nvidia-smi
// prints them: "580.126.09" is 580.126.9, "8.0" is 8.0.0.
func (b Builder) VersionRange(name resourceapi.QualifiedName, min, max string) (string, error) {
	if min == "" && max == "" {
		return "", fmt.Errorf("%s: a minimum or a maximum version is required", name)
	}
	var terms []string
	for _, bound := range []struct{ v, op, which string }{{min, ">=", "minimum"}, {max, "<", "maximum"}} {
		if bound.v == "" {
			continue
		}
		v, err := NormalizeVersion(bound.v)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", name, bound.which, err)
		}
		terms = append(terms, fmt.Sprintf("%s.compareTo(semver(%s)) %s 0", b.attr(name), text.Quote(v), bound.op))
	}
	return strings.Join(terms, " && "), nil
}

// MinMemory selects devices with at least q of memory (the "memory" capacity, not an
// attribute).
func (b Builder) MinMemory(q resource.Quantity) string {
	return b.CompareCapacity(gpudra.CapMemory, ">=", q)
}

// MaxMemory selects devices with at most q of memory.
func (b Builder) MaxMemory(q resource.Quantity) string {
	return b.CompareCapacity(gpudra.CapMemory, "<=", q)
}

// CompareCapacity compares a capacity with a quantity using one of ==, !=, <, <=, >, >=; it
// returns "" for another operator. Quantities are compared by value (compareTo), so 40Gi and
// 40960Mi are equal.
func (b Builder) CompareCapacity(name resourceapi.QualifiedName, op string, q resource.Quantity) string {
	switch op {
	case "==", "!=", "<", "<=", ">", ">=":
	default:
		return ""
	}
	return fmt.Sprintf("%s.compareTo(quantity(%s)) %s 0", b.capacity(name), text.Quote(q.String()), op)
}

// And joins selectors so that all must match. Operands that contain "||" or "?" are
// parenthesized; empty operands are left out.
func And(exprs ...string) string { return join(" && ", exprs) }

// Or joins selectors so that at least one must match. Operands with && or || are
// parenthesized; empty operands are left out.
func Or(exprs ...string) string { return join(" || ", exprs) }

// Not negates a selector.
func Not(expr string) string { return "!(" + expr + ")" }

func join(op string, exprs []string) string {
	var parts []string
	for _, e := range exprs {
		if e = strings.TrimSpace(e); e != "" {
			parts = append(parts, e)
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	for i, e := range parts {
		if strings.Contains(e, "||") || strings.Contains(e, "?") || op == " || " && strings.Contains(e, "&&") {
			parts[i] = "(" + e + ")"
		}
	}
	return strings.Join(parts, op)
}

// MatchAttribute is a constraint that the devices allocated for the given requests (all of the
// claim's requests when none are given) have the same value of a fully qualified attribute.
func MatchAttribute(attr resourceapi.FullyQualifiedName, requests ...string) resourceapi.DeviceConstraint {
	a := attr
	return resourceapi.DeviceConstraint{Requests: requests, MatchAttribute: &a}
}

// SamePCIeRoot constrains the requests' devices to one PCIe root complex
// (resource.kubernetes.io/pcieRoot).
func SamePCIeRoot(requests ...string) resourceapi.DeviceConstraint {
	return MatchAttribute(resourceapi.FullyQualifiedName(gpudra.StdAttrPCIeRoot), requests...)
}

// SameNUMANode constrains the requests' devices to one NUMA node
// (resource.kubernetes.io/numaNode).
func SameNUMANode(requests ...string) resourceapi.DeviceConstraint {
	return MatchAttribute(resourceapi.FullyQualifiedName(gpudra.StdAttrNUMANode), requests...)
}

// SameParentGPU constrains the requests' MIG devices to one physical GPU (the driver's
// parentUUID attribute).
func (b Builder) SameParentGPU(requests ...string) resourceapi.DeviceConstraint {
	return MatchAttribute(resourceapi.FullyQualifiedName(b.driver+"/"+string(gpudra.AttrParentUUID)), requests...)
}

// SameNVLinkIsland constrains the requests' devices to one NVLink island (the driver's
// nvlinkIsland attribute, gpudra.AttrNVLinkIsland): GPUs that reach each other over NVLink,
// directly or through NVSwitches; MIG devices carry their GPU's island. Devices on no island
// (PCIe-only GPUs) never satisfy it.
func (b Builder) SameNVLinkIsland(requests ...string) resourceapi.DeviceConstraint {
	return MatchAttribute(resourceapi.FullyQualifiedName(b.driver+"/"+string(gpudra.AttrNVLinkIsland)), requests...)
}

// SameNVLinkDomain constrains the requests' devices to one multi-node NVLink fabric domain (the
// driver's nvlinkDomain attribute, gpudra.AttrNVLinkDomain; GB200-class systems). Devices in no
// fabric never satisfy it.
func (b Builder) SameNVLinkDomain(requests ...string) resourceapi.DeviceConstraint {
	return MatchAttribute(resourceapi.FullyQualifiedName(b.driver+"/"+string(gpudra.AttrNVLinkDomain)), requests...)
}

// ConstraintFunc makes a constraint on the named requests: SamePCIeRoot, SameNUMANode and the
// Builder's SameNVLinkIsland, SameNVLinkDomain and SameParentGPU are ConstraintFuncs.
type ConstraintFunc func(requests ...string) resourceapi.DeviceConstraint

// GPUClaim returns the devices of a ResourceClaim spec asking for n full GPUs in one request
// named request, from the driver's GPU DeviceClass (as DeviceClasses names it), with every
// constraint applied to that request. For example, four GPUs on one NVLink island:
//
//	devices, err := b.GPUClaim("gpus", 4, b.SameNVLinkIsland)
//
// request must be a DNS label and n between 1 and 32 (the most devices one claim can get).
func (b Builder) GPUClaim(request string, n int64, constraints ...ConstraintFunc) (resourceapi.DeviceClaim, error) {
	if errs := validation.IsDNS1123Label(request); len(errs) > 0 {
		return resourceapi.DeviceClaim{}, fmt.Errorf("GPUClaim: request name %q: %s", request, strings.Join(errs, "; "))
	}
	if n < 1 || n > resourceapi.AllocationResultsMaxSize {
		return resourceapi.DeviceClaim{}, fmt.Errorf("GPUClaim: request %q: count %d: want 1 to %d GPUs", request, n, resourceapi.AllocationResultsMaxSize)
	}
	out := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: request, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: DeviceClasses(b.driver)[0].Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n,
	}}}}
	for k, c := range constraints {
		if c == nil {
			return resourceapi.DeviceClaim{}, fmt.Errorf("GPUClaim: request %q: constraint %d is nil", request, k)
		}
		out.Constraints = append(out.Constraints, c(request))
	}
	return out, nil
}

// DeviceClasses returns the DeviceClasses the driver ships: one selecting full GPUs, one
// selecting MIG devices and one selecting GPUs published for passthrough to a virtual machine
// (type vfio, gpudra.WithPassthrough), in that order. With the default driver name they are
// gpu.nvidia.com, mig.nvidia.com and vfio.gpu.nvidia.com, as manifests written for NVIDIA's DRA
// driver expect; another driver name D gets gpu.D, mig.D and vfio.D. The vfio class selects
// nothing on a node that does not publish passthrough.
func DeviceClasses(driverName string) []*resourceapi.DeviceClass {
	b := For(driverName)
	gpuClass, migClass, vfioClass := gpudra.GPUDeviceClassName, gpudra.MIGDeviceClassName, gpudra.VFIODeviceClassName
	if b.driver != gpudra.DefaultDriverName {
		gpuClass, migClass, vfioClass = "gpu."+b.driver, "mig."+b.driver, "vfio."+b.driver
	}
	return []*resourceapi.DeviceClass{
		deviceClass(gpuClass, b.GPU()),
		deviceClass(migClass, b.MIG()),
		deviceClass(vfioClass, b.Type(gpudra.DeviceTypeVFIO)),
	}
}

func deviceClass(name, expression string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expression}}},
		},
	}
}

// NormalizeVersion turns a version as NVIDIA tools print it into a semantic version CEL's
// semver() accepts: leading zeros dropped, missing minor and patch added, a "v" prefix removed
// ("580.126.09" → "580.126.9", "8.0" → "8.0.0", "v12" → "12.0.0").
func NormalizeVersion(v string) (string, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	core, rest := s, ""
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		core, rest = s[:i], s[i:]
	}
	parts := strings.Split(core, ".")
	if len(parts) > 3 || core == "" {
		return "", fmt.Errorf("version %q: want MAJOR[.MINOR[.PATCH]]", v)
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return "", fmt.Errorf("version %q: %q is not a number", v, p)
		}
		parts[i] = strconv.FormatUint(n, 10)
	}
	out := strings.Join(parts, ".") + rest
	if _, err := semver.Parse(out); err != nil {
		return "", fmt.Errorf("version %q: %w", v, err)
	}
	return out, nil
}
