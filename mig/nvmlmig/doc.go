// Package nvmlmig is the NVML side of package mig: it reads a GPU's own MIG geometry, lists the
// GPU and compute instances that exist on it, and creates and destroys them, through go-nvml's
// nvml.Device (a real GPU, or a gpu/gputest fake machine's). It needs cgo, as go-nvml does;
// package mig, which validates and plans layouts without hardware, does not.
//
// # Pieces
//
//   - DeviceModel returns the MIG model a driver should use for a GPU: ModelFromDevice reads
//     every GPU-instance profile the GPU supports and its placements, and mig.MergeCatalog
//     completes it from the built-in catalog and reports where the two differ (mig.Compare).
//     ArchitectureName names an NVML architecture as NVIDIA's tools do.
//   - ListInstances walks the GPU instances and compute instances (MIG devices) of a GPU, with
//     their NVML handles and, where NVML lists MIG device handles, their UUIDs; a failure is a
//     *WalkError naming the NVML call. ListEnabledInstances does the same for a caller that has
//     just read the MIG mode.
//   - InstanceManager changes one GPU: EnableMIG and DisableMIG switch MIG mode (reporting when a
//     reset is needed), Apply makes a layout exist (validated with mig.Validate beside the
//     existing instances, idempotent, rolled back on failure) and Remove destroys instances.
//
// # Creating instances on demand
//
//	im, err := nvmlmig.NewInstanceManager(dev, nil) // nil: the model of the GPU's product name
//	current, err := im.Current()                     // the instances that exist, placed
//	placed, err := mig.Plan(im.Model(), current, []string{"1g.5gb"})
//	created, err := im.Apply(placed) // created[0].GPUInstanceID, ComputeInstanceID
//	// ... at unprepare:
//	err = im.Remove(placed)
//
// A driver that serves a GPU of a product the catalog may not know passes DeviceModel's model to
// NewInstanceManager instead of nil, and logs the differences once.
package nvmlmig
