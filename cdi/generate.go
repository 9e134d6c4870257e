package cdi

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"tags.cncf.io/container-device-interface/pkg/parser"
	"tags.cncf.io/container-device-interface/specs-go"
)

// Defaults of the CDI names; they match NVIDIA's DRA driver, so the device IDs are
// k8s.gpu.nvidia.com/claim=<claimUID>-<device>.
const (
	DefaultVendor = "k8s.gpu.nvidia.com"
	DefaultClass  = "claim"
	// DefaultSpecDir is the CDI directory for generated (transient) specs.
	DefaultSpecDir = "/var/run/cdi"
)

// VisibleDevicesVoid is the environment entry added by default to every spec: it turns
// nvidia-container-runtime's legacy injection off for containers whose image sets
// NVIDIA_VISIBLE_DEVICES (the CUDA images set "all"), so that a container gets exactly the
// devices of its claim and not every GPU of the node. CUDA itself does not read the variable.
const VisibleDevicesVoid = "NVIDIA_VISIBLE_DEVICES=void"

// MountOptions are the options of every driver file mount.
func MountOptions() []string { return []string{"ro", "nosuid", "nodev", "rbind", "rprivate"} }

// ClaimDevices is the input of Generate: the devices allocated to one ResourceClaim on this node.
type ClaimDevices struct {
	// ClaimUID is the ResourceClaim's UID, a canonical lower-case UUID.
	ClaimUID string
	// Devices are the claim's devices on this node, at least one.
	Devices []Device
	// Edits are claim-wide container edits (for example from the sharing package), merged into
	// the spec-level edits that a container gets once when it uses any device of the claim.
	Edits *specs.ContainerEdits
}

// Device is one allocated device.
type Device struct {
	// Name is the DRA device name (a DNS label, for example "gpu-0" or "gpu-0-mig-1g5gb-19-0").
	Name string
	// GPUMinor is the minor of /dev/nvidia<N>: the GPU's, or the MIG device's parent's.
	GPUMinor int
	// UUID is the GPU or MIG device UUID; it only appears in error messages.
	UUID string
	// MIG, when set, makes this a MIG device that also gets its GI and CI capability nodes.
	MIG *MIGInstanceIDs
	// Edits are extra container edits for this device (for example from the sharing package).
	Edits *specs.ContainerEdits
}

// MIGInstanceIDs identifies a MIG device inside its parent GPU.
type MIGInstanceIDs struct {
	// GI is the GPU instance ID and CI the compute instance ID (NVML ids, not profile ids).
	GI, CI int
}

// ClaimSpec is a generated, validated CDI spec for one claim.
type ClaimSpec struct {
	// ClaimUID is the claim the spec belongs to.
	ClaimUID string
	// Spec is the CDI spec; its Version is the minimum the content needs.
	Spec *specs.Spec
	// DeviceIDs maps each DRA device name to its qualified CDI device ID.
	DeviceIDs map[string]string
}

// Hooks configures the OCI hooks a spec asks the runtime to run at createContainer, through
// NVIDIA's nvidia-cdi-hook (or "nvidia-ctk hook" when Path's base name is nvidia-ctk).
type Hooks struct {
	// Path is the hook binary's absolute path on the host.
	Path string
	// CreateSymlinks adds the libcuda.so -> libcuda.so.1 link that development tools expect.
	CreateSymlinks bool
	// UpdateLdcache runs ldconfig for the library directories so the driver libraries resolve.
	UpdateLdcache bool
	// LdconfigPath, when set, is passed to update-ldcache as --ldconfig-path.
	LdconfigPath string
}

// GeneratorOption configures NewGenerator.
type GeneratorOption func(*Generator)

// WithKind sets the CDI vendor and class of the specs (defaults DefaultVendor and
// DefaultClass). The Writer that stores them needs the same kind (WithWriterKind).
func WithKind(vendor, class string) GeneratorOption {
	return func(g *Generator) { g.vendor, g.class = vendor, class }
}

// WithHooks adds nvidia-cdi-hook hooks to every spec. Without it specs have no hooks.
func WithHooks(h Hooks) GeneratorOption { return func(g *Generator) { g.hooks = &h } }

// WithVisibleDevicesVoid chooses whether specs set VisibleDevicesVoid (default true).
func WithVisibleDevicesVoid(enabled bool) GeneratorOption {
	return func(g *Generator) { g.void = enabled }
}

// WithoutDriverFiles leaves library, binary and firmware mounts out of the specs, for runtimes
// that get the driver files another way. Device nodes are still added.
func WithoutDriverFiles() GeneratorOption { return func(g *Generator) { g.noFiles = true } }

// Generator turns ClaimDevices into CDI specs. It is immutable and safe for concurrent use.
type Generator struct {
	inst          *Installation
	vendor, class string
	hooks         *Hooks
	void          bool
	noFiles       bool
}

// NewGenerator returns a Generator for the driver installation inst.
func NewGenerator(inst *Installation, opts ...GeneratorOption) (*Generator, error) {
	if inst == nil {
		return nil, errors.New("cdi generator: nil Installation (use Discover)")
	}
	g := &Generator{inst: inst, vendor: DefaultVendor, class: DefaultClass, void: true}
	for _, o := range opts {
		o(g)
	}
	if err := validateKind(g.vendor, g.class); err != nil {
		return nil, fmt.Errorf("cdi generator: %w", err)
	}
	if h := g.hooks; h != nil {
		if !filepath.IsAbs(h.Path) {
			return nil, fmt.Errorf("cdi generator: hook path %q must be an absolute host path", h.Path)
		}
		if h.LdconfigPath != "" && !filepath.IsAbs(h.LdconfigPath) && !strings.HasPrefix(h.LdconfigPath, "@/") {
			return nil, fmt.Errorf("cdi generator: ldconfig path %q must be absolute (or \"@/...\" for a host path)", h.LdconfigPath)
		}
	}
	return g, nil
}

// Kind returns the spec kind, "<vendor>/<class>".
func (g *Generator) Kind() string { return g.vendor + "/" + g.class }

// DeviceID returns the qualified CDI device ID of a device of a claim:
// "<vendor>/<class>=<claimUID>-<device>".
func (g *Generator) DeviceID(claimUID, device string) (string, error) {
	if err := ValidateClaimUID(claimUID); err != nil {
		return "", err
	}
	if err := validateDeviceName(device); err != nil {
		return "", fmt.Errorf("claim %s: %w", claimUID, err)
	}
	return parser.QualifiedName(g.vendor, g.class, claimUID+"-"+device), nil
}

// Generate builds and validates the spec of one claim. Device nodes and MIG capabilities are read
// from the driver root now; a missing /dev/nvidia<N> or nvidiactl is an error rather than a spec
// that silently lacks the device.
//
// Spec-level edits (applied once per container) hold the control device nodes, driver file
// mounts, hooks, VisibleDevicesVoid and the claim's Edits. Each device holds its own nodes (GPU
// node; for MIG the parent node plus GI and CI capability nodes) and its Edits. Within one of
// these edit sets, an entry given twice with different content (an environment variable, a
// device node or mount path) is an error; identical duplicates are dropped. A device listed
// twice (a claim that got one device for two requests, as consumable capacity allows) is one
// CDI device with both entries' edits merged; listing one name with different hardware is an
// error.
func (g *Generator) Generate(claim ClaimDevices) (*ClaimSpec, error) {
	if err := ValidateClaimUID(claim.ClaimUID); err != nil {
		return nil, err
	}
	uid := claim.ClaimUID
	if len(claim.Devices) == 0 {
		return nil, fmt.Errorf("claim %s: no devices", uid)
	}

	common, err := g.commonEdits(claim)
	if err != nil {
		return nil, err
	}
	devs, err := g.deviceEdits(uid, claim.Devices)
	if err != nil {
		return nil, err
	}
	return NewClaimSpec(g.Kind(), uid, common, devs)
}

// commonEdits are the spec-level edits of a claim's spec.
func (g *Generator) commonEdits(claim ClaimDevices) (specs.ContainerEdits, error) {
	uid := claim.ClaimUID
	var common specs.ContainerEdits
	nodes, err := g.inst.ControlDeviceNodes()
	if err != nil {
		return common, fmt.Errorf("claim %s: %w", uid, err)
	}
	common.DeviceNodes = nodes
	if g.void {
		common.Env = []string{VisibleDevicesVoid}
	}
	if !g.noFiles {
		for _, group := range [][]File{g.inst.Libraries, g.inst.Binaries, g.inst.Firmware} {
			for _, f := range group {
				common.Mounts = append(common.Mounts, &specs.Mount{
					HostPath: f.HostPath, ContainerPath: f.Path, Options: MountOptions(),
				})
			}
		}
		common.Hooks = g.hookEdits()
	}
	if err := mergeEdits(&common, claim.Edits); err != nil {
		return common, fmt.Errorf("claim %s: claim edits: %w", uid, err)
	}
	return common, nil
}

// deviceEdits are the CDI devices of a claim's devices; a device listed twice is merged.
func (g *Generator) deviceEdits(uid string, devices []Device) ([]DeviceEdits, error) {
	devs := make([]DeviceEdits, 0, len(devices))
	seen := make(map[string]int, len(devices)) // device name → index in devs
	var caps *MIGCaps
	for _, d := range devices {
		where := fmt.Sprintf("claim %s device %q", uid, d.Name)
		if d.UUID != "" {
			where += " (" + d.UUID + ")"
		}
		if err := validateDeviceName(d.Name); err != nil {
			return nil, fmt.Errorf("claim %s: %w", uid, err)
		}
		if j, dup := seen[d.Name]; dup {
			if err := g.mergeRepeated(&devs[j].Edits, d, caps); err != nil {
				return nil, fmt.Errorf("%s: listed twice: %w", where, err)
			}
			continue
		}
		seen[d.Name] = len(devs)
		var edits specs.ContainerEdits
		n, err := g.inst.GPUDeviceNode(d.GPUMinor)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		edits.DeviceNodes = append(edits.DeviceNodes, n)
		if d.MIG != nil {
			if d.MIG.GI < 0 || d.MIG.CI < 0 {
				return nil, fmt.Errorf("%s: MIG GI %d and CI %d must not be negative", where, d.MIG.GI, d.MIG.CI)
			}
			if caps == nil {
				if caps, err = g.inst.MIGCaps(); err != nil {
					return nil, fmt.Errorf("%s: %w", where, err)
				}
			}
			capNodes, err := caps.DeviceNodes(d.GPUMinor, d.MIG.GI, d.MIG.CI)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			edits.DeviceNodes = append(edits.DeviceNodes, capNodes...)
		}
		if err := mergeEdits(&edits, d.Edits); err != nil {
			return nil, fmt.Errorf("%s: device edits: %w", where, err)
		}
		devs = append(devs, DeviceEdits{Name: d.Name, Edits: edits})
	}
	return devs, nil
}

// DeviceEdits is one device of a claim spec: its DRA device name and what a container that
// gets the device receives.
type DeviceEdits struct {
	// Name is the DRA device name, a DNS label; the CDI device is "<claimUID>-<Name>".
	Name string
	// Edits are the device's container edits: device nodes, environment, mounts, hooks.
	Edits specs.ContainerEdits
}

// NewClaimSpec builds and validates the spec of one claim for devices of any kind: common are
// spec-level edits a container gets once when it uses any device of the claim, and each device
// becomes the CDI device "<claimUID>-<name>" with its edits, in order. kind is the spec's
// "<vendor>/<class>" (Writer.Kind); the version is the minimum the content needs. Generate
// builds GPU specs with it; a driver for another kind of device calls it directly.
func NewClaimSpec(kind, claimUID string, common specs.ContainerEdits, devices []DeviceEdits) (*ClaimSpec, error) {
	if err := ValidateClaimUID(claimUID); err != nil {
		return nil, err
	}
	vendor, class := parser.ParseQualifier(kind)
	if err := validateKind(vendor, class); err != nil {
		return nil, fmt.Errorf("claim %s: spec kind %q: %w", claimUID, kind, err)
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("claim %s: no devices", claimUID)
	}
	spec := &specs.Spec{Kind: kind, ContainerEdits: common, Devices: make([]specs.Device, 0, len(devices))}
	ids := make(map[string]string, len(devices))
	for _, d := range devices {
		if err := validateDeviceName(d.Name); err != nil {
			return nil, fmt.Errorf("claim %s: %w", claimUID, err)
		}
		if _, dup := ids[d.Name]; dup {
			return nil, fmt.Errorf("claim %s: device %q: listed twice", claimUID, d.Name)
		}
		name := claimUID + "-" + d.Name
		spec.Devices = append(spec.Devices, specs.Device{Name: name, ContainerEdits: d.Edits})
		ids[d.Name] = parser.QualifiedName(vendor, class, name)
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("claim %s: minimum CDI version: %w", claimUID, err)
	}
	spec.Version = v
	if err := Validate(spec); err != nil {
		return nil, fmt.Errorf("claim %s: generated spec is invalid: %w", claimUID, err)
	}
	return &ClaimSpec{ClaimUID: claimUID, Spec: spec, DeviceIDs: ids}, nil
}

// mergeRepeated merges a device listed a second time into its CDI device: it must name the same
// hardware (its device nodes come out the same); its edits are merged.
func (g *Generator) mergeRepeated(dst *specs.ContainerEdits, d Device, caps *MIGCaps) error {
	var nodes specs.ContainerEdits
	n, err := g.inst.GPUDeviceNode(d.GPUMinor)
	if err != nil {
		return err
	}
	nodes.DeviceNodes = append(nodes.DeviceNodes, n)
	if d.MIG != nil {
		if caps == nil {
			if caps, err = g.inst.MIGCaps(); err != nil {
				return err
			}
		}
		capNodes, err := caps.DeviceNodes(d.GPUMinor, d.MIG.GI, d.MIG.CI)
		if err != nil {
			return err
		}
		nodes.DeviceNodes = append(nodes.DeviceNodes, capNodes...)
	}
	for _, n := range nodes.DeviceNodes {
		if !slices.ContainsFunc(dst.DeviceNodes, func(m *specs.DeviceNode) bool { return m.Path == n.Path && m.Minor == n.Minor }) {
			return fmt.Errorf("the two entries name different hardware (device node %s %d:%d)", n.Path, n.Major, n.Minor)
		}
	}
	if err := mergeEdits(dst, d.Edits); err != nil {
		return fmt.Errorf("device edits: %w", err)
	}
	return nil
}

func (g *Generator) hookEdits() []*specs.Hook {
	h := g.hooks
	if h == nil || len(g.inst.Libraries) == 0 {
		return nil
	}
	base := []string{"nvidia-cdi-hook"}
	if path.Base(h.Path) == "nvidia-ctk" {
		base = []string{"nvidia-ctk", "hook"}
	}
	hook := func(args ...string) *specs.Hook {
		return &specs.Hook{HookName: "createContainer", Path: h.Path, Args: append(append([]string(nil), base...), args...)}
	}
	var hooks []*specs.Hook
	if h.CreateSymlinks {
		for _, l := range g.inst.Libraries {
			if path.Base(l.Path) == "libcuda.so."+g.inst.DriverVersion {
				hooks = append(hooks, hook("create-symlinks", "--link", "libcuda.so.1::"+path.Join(path.Dir(l.Path), "libcuda.so")))
			}
		}
	}
	if h.UpdateLdcache {
		args := []string{"update-ldcache"}
		if h.LdconfigPath != "" {
			args = append(args, "--ldconfig-path", h.LdconfigPath)
		}
		for _, d := range g.inst.LibraryDirs() {
			args = append(args, "--folder", d)
		}
		hooks = append(hooks, hook(args...))
	}
	return hooks
}

// ValidateClaimUID accepts only a canonical lower-case UUID (36 characters, as Kubernetes
// generates them). It runs before a claim UID becomes part of any path or name.
func ValidateClaimUID(uid string) error {
	u, err := uuid.Parse(uid)
	if err != nil || len(uid) != 36 || u.String() != uid {
		return fmt.Errorf("claim UID %q: must be a canonical lower-case UUID like 123e4567-e89b-12d3-a456-426614174000", uid)
	}
	return nil
}

func validateDeviceName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("device name %q: must be a DNS label: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

func validateKind(vendor, class string) error {
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fmt.Errorf("CDI vendor %q: %w", vendor, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fmt.Errorf("CDI class %q: %w", class, err)
	}
	return nil
}
