// Package nvmlgpu enumerates NVIDIA GPUs and their existing MIG devices through NVML into the
// plain values of package gpu (gpu.Inventory, gpu.GPU, gpu.MIGDevice). It uses go-nvml and so
// needs cgo; package gpu, which only holds the values, does not.
//
// # NVML's lifecycle
//
// The NVML lifecycle belongs to the caller: Open (any nvml.Interface, e.g. a gpu/gputest fake
// machine) or OpenReal (the host's libnvidia-ml.so.1) initializes NVML and returns a Session
// whose Close shuts it down. Enumerate works on any initialized nvml.Interface; Session.Interface
// gives the library to the packages that take one (topology/nvmltopology.Discover, draplugin).
//
// # Driver roots
//
// A driver installed elsewhere than "/" (the host's driver root mounted into a plugin's
// container) is loaded with OpenReal(WithDriverRoot(root)): FindLibrary finds libnvidia-ml.so.1
// in the root's library directories (LibrarySearchDirs), resolving symbolic links inside the
// root, and NVML is loaded by that absolute path. The root's other libraries never reach this
// process: pointing LD_LIBRARY_PATH at them would load the root's C library with this process's
// dynamic loader, which kills the process when the two glibc versions differ. Without the library
// OpenReal returns an error wrapping ErrNVMLNotFound.
//
// # Enumeration
//
// Enumerate reads the driver versions and every GPU; for a MIG-capable GPU also its MIG geometry
// (mig/nvmlmig.DeviceModel, once per product; ReadMIGGeometry(false) skips it) and, in MIG mode,
// its MIG devices, named through the mig catalog (WithCatalog replaces it). A GPU that fails
// mid-enumeration is a *gpu.DeviceError; SkipFailedGPUs(true) records it in Inventory.Errors and
// goes on instead of failing.
//
//	sess, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot("/run/nvidia/driver"))
//	if err != nil {
//		return err // errors.Is(err, nvmlgpu.ErrNVMLNotFound): no NVIDIA driver here
//	}
//	defer sess.Close()
//	inv, err := sess.Enumerate(ctx, nvmlgpu.SkipFailedGPUs(true))
//	// inv.GPUs, inv.Errors; then gpudra.NewBuilder().Build(nodeName, inv)
package nvmlgpu
