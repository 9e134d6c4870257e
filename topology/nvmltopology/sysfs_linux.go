package nvmltopology

import "k8s.io/dynamic-resource-allocation/deviceattribute"

// sysfsPCIeRoot resolves busID's PCIe root under the sysfs tree at root, as the Kubernetes
// standard attribute defines it. ok is false when sysfs does not know the device.
func sysfsPCIeRoot(root, busID string) (string, bool) {
	a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFSFromRoot(root))
	if err != nil || a.Value.StringValue == nil || *a.Value.StringValue == "" {
		return "", false
	}
	return *a.Value.StringValue, true
}
