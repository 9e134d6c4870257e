package gpudra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeviceClasses returns the DeviceClasses the driver ships: one selecting full GPUs and one
// selecting MIG devices. With the default driver name they are gpu.nvidia.com and mig.nvidia.com,
// as manifests written for NVIDIA's DRA driver expect.
func DeviceClasses(driverName string) []*resourceapi.DeviceClass {
	if driverName == "" {
		driverName = DefaultDriverName
	}
	gpuClass, migClass := GPUDeviceClassName, MIGDeviceClassName
	if driverName != DefaultDriverName {
		gpuClass, migClass = "gpu."+driverName, "mig."+driverName
	}
	return []*resourceapi.DeviceClass{
		deviceClass(gpuClass, driverName, DeviceTypeGPU),
		deviceClass(migClass, driverName, DeviceTypeMIG),
	}
}

func deviceClass(name, driver, typ string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: TypeSelector(driver, typ)},
			}},
		},
	}
}

// TypeSelector is the CEL expression that selects the driver's devices of one type.
func TypeSelector(driver, typ string) string {
	return fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == '%s'", driver, driver, typ)
}
