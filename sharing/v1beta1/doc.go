// Package v1beta1 is the opaque device configuration API resource.nvidia.com/v1beta1 that claims
// and DeviceClasses carry in opaque.parameters: the kinds GpuConfig (full GPUs) and
// MigDeviceConfig (MIG devices), each with an optional sharing section.
//
// The wire format is the one NVIDIA's DRA driver accepts, so manifests written for it decode
// unchanged:
//
//	apiVersion: resource.nvidia.com/v1beta1
//	kind: GpuConfig
//	sharing:
//	  strategy: TimeSlicing          # or MPS
//	  timeSlicingConfig:
//	    interval: Default            # Default | Short | Medium | Long
//
// Decoding is strict (a Decoder built by NewDecoder): unknown and duplicate fields, unknown
// kinds and apiVersions and invalid values are errors with field paths. A decoded config is
// defaulted and validated; a missing sharing section means exclusive use of the device.
//
// A few field names of the older gpu.resource.nvidia.com/v1alpha1 API are accepted where their
// meaning did not change (timeSlicingConfig.timeSlice, mpsConfig.activeThreadPercentage,
// mpsConfig.pinnedDeviceMemoryLimit) and are moved to the current field by Default. Old names
// without a current equivalent, and the old apiVersion itself, are rejected with an error that
// names what to write instead.
//
// There is no package-level scheme: NewScheme and NewDecoder build fresh ones.
//
// The DeepCopy methods are generated (make generate).
//
// +k8s:deepcopy-gen=package
package v1beta1
