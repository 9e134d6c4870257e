package v1beta1

import "testing"

func BenchmarkDecodeValidate(b *testing.B) {
	inputs := map[string]string{
		"yaml-timeslicing": hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: Long\n",
		"yaml-mps":         hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 50\n    defaultPinnedDeviceMemoryLimit: 10Gi\n    defaultPerDevicePinnedMemoryLimit:\n      \"0\": 4Gi\n",
		"json-mps":         `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi","defaultPerDevicePinnedMemoryLimit":{"0":"4Gi"}}}}`,
	}
	d := NewDecoder()
	for name, in := range inputs {
		data := []byte(in)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
