package v1beta1_test

import (
	"fmt"

	"github.com/gpudra/gpudra/sharing/v1beta1"
)

func ExampleDecoder_Decode() {
	d := v1beta1.NewDecoder()
	cfg, err := d.Decode([]byte(`
apiVersion: resource.nvidia.com/v1beta1
kind: GpuConfig
sharing:
  strategy: TimeSlicing
`))
	if err != nil {
		panic(err)
	}
	gc := cfg.(*v1beta1.GpuConfig)
	fmt.Println(gc.Strategy(), gc.Interval(), gc.Interval().Int())

	_, err = d.Decode([]byte(`
apiVersion: resource.nvidia.com/v1beta1
kind: GpuConfig
sharing:
  strategy: TimeSlicing
  timeSlicingConfig:
    interval: Fast
`))
	fmt.Println(err)
	// Output:
	// TimeSlicing Default 0
	// invalid GpuConfig: sharing.timeSlicingConfig.interval: Unsupported value: "Fast": supported values: "Default", "Long", "Medium", "Short"
}
