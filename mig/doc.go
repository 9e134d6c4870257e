// Package mig knows NVIDIA Multi-Instance GPU (MIG) geometry well enough to answer, without
// hardware and in microseconds, whether a layout of GPU instances is valid and why not; package
// mig/nvmlmig makes it so on hardware, safely.
//
// The pieces, bottom up:
//
//   - Profiles: ParseProfile and Profile.String read and write MIG profile names ("1g.5gb",
//     "1c.2g.10gb", "1g.10gb+me", "1g.24gb-me", "1g.24gb+me.all", "1g.24gb+gfx"); malformed names
//     give a *ProfileSyntaxError with the byte position.
//   - Catalog: Models and Lookup return per-model geometry (GIProfile: NVML enum and profile Id,
//     memory, SMs, engines, instance count, placements in memory slices, compute-instance
//     profiles). GIProfile.Sources says per field whether a value was printed by nvidia-smi on
//     that model (SourceRecorded; the recordings are gputest's fixtures), stated by NVIDIA
//     (SourceDocumented) or inferred (SourceInferred).
//   - Models from hardware: MergeCatalog completes a model read from a live GPU with the catalog
//     and reports, as data, where the two differ (Compare), for a log line and a metric.
//     ParseSMIProfiles, ParseSMIPlacements, ParseSMIInstances and ModelFromSMI read nvidia-smi
//     mig -lgip, -lgipp and -lgi printouts.
//   - Layouts: Validate checks a layout (placement allowed, no memory-slice overlap, instance
//     counts, media-engine exclusivity, compute slices) and assigns placements to unplaced
//     instances; errors are *ValidationError values naming the instances and slices in conflict.
//     ParseLayout reads "3g.20gb,2g.10gb@4,1g.5gb". Layouts and MaximalLayouts enumerate every
//     valid position-aware layout; Diagram draws one over the memory slices.
//   - Planner: Plan places requested profiles beside existing instances, keeping the largest free
//     regions.
//   - mig-parted: ParseConfig reads the "version: v1" config format strictly, BuiltinConfigs gives
//     the named configs (all-disabled, all-enabled, all-<profile>, all-balanced), and CheckConfig
//     validates a config against a machine's GPUs up front.
//   - Strategies: CheckStrategy applies GPU Feature Discovery's none/single/mixed rules to a node.
//
// The package holds no mutable global state: the catalog is built once and every accessor returns
// a copy.
//
// The package does not use NVML and builds without cgo: a controller, a scheduler simulation or
// a cluster autoscaler can import it. What talks to a GPU lives in mig/nvmlmig: DeviceModel and
// ModelFromDevice read a GPU's own MIG geometry, ListInstances lists its GPU and compute
// instances, and InstanceManager creates and destroys them.
package mig
