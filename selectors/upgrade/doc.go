// Package upgrade rewrites manifests written for older DRA APIs into resource.k8s.io/v1:
// resource.k8s.io/v1beta1 and v1beta2 objects, and classic DRA (v1alpha2 ResourceClasses and
// claims with parameters) including NVIDIA's gpu.resource.nvidia.com/v1alpha1
// GpuClaimParameters, MigClaimParameters and VfioGpuClaimParameters, whose selectors become CEL
// written with the builders of package selectors and whose sharing settings become the driver's
// opaque configuration; a VfioGpuClaimParameters request becomes one of the DeviceClass of GPUs
// passed through to virtual machines (vfio.gpu.nvidia.com).
//
// # Upgrading
//
// An Upgrader converts a whole multi-document manifest; documents that need no change are kept
// byte for byte. The Upgrade lists every Change; what has no resource.k8s.io/v1 equivalent is
// an *UpgradeError in the joined error, and the rest is still converted.
//
//	up, err := upgrade.NewUpgrader("gpu.nvidia.com").Upgrade(data)
//	if up == nil {
//		return err // not YAML
//	}
//	for _, c := range up.Changes {
//		fmt.Println(c.Severity, c.Object, c.Message) // warning ResourceClaim default/x resource.k8s.io/v1beta1 ...
//	}
//	os.Stdout.Write(up.Manifest)
//
// Upgrading an upgraded manifest changes nothing.
package upgrade
