package v1beta1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecode checks that decoding never panics, that whatever decodes also validates, and that
// an accepted config survives an encode/decode round trip unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		hdrGPU + "sharing:\n  strategy: TimeSlicing\n",
		hdrGPU + "sharing:\n  strategy: MPS\n",
		hdrGPU + "sharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: Long\n",
		hdrGPU + "sharing:\n  strategy: MPS\n  mpsConfig:\n    defaultActiveThreadPercentage: 50\n    defaultPinnedDeviceMemoryLimit: 10Gi\n    defaultPerDevicePinnedMemoryLimit:\n      \"0\": 4Gi\n",
		hdrMIG + "sharing:\n  strategy: MPS\n",
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"activeThreadPercentage":3}}}`,
		"apiVersion: gpu.resource.nvidia.com/v1alpha1\nkind: GpuClaimParameters\n",
		"{}", "[", "",
	} {
		f.Add([]byte(s))
	}
	d := NewDecoder()
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := d.Decode(data)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("decoded config does not validate: %v", err)
		}
		enc, err := d.Encode(cfg)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		again, err := d.Decode(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(cfg, again, quantityCmp); diff != "" {
			t.Fatalf("round trip through %s (-first +second):\n%s", enc, diff)
		}
	})
}
