//go:build !linux

package nvmltopology

// sysfsPCIeRoot never knows a device off Linux: there is no sysfs, so roots are derived.
func sysfsPCIeRoot(root, busID string) (string, bool) { return "", false }
