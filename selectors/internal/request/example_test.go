package request_test

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpudra/gpudra/selectors"
	"github.com/gpudra/gpudra/selectors/internal/request"
	"github.com/gpudra/gpudra/selectors/internal/text"
)

// Example analyzes a claim with a plain request and a firstAvailable one, without a machine:
// what the requests can select comes from their selectors' literals.
func Example() {
	spec := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
		{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", Count: 2}},
		{Name: "mig", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "small", DeviceClassName: "mig.nvidia.com", Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: "device.attributes['gpu.nvidia.com'].profile in ['1g.5gb', '1g.10gb']"}}}},
		}},
	}}}
	classes := request.KnownClasses("gpu.nvidia.com", nil, nil)
	c := selectors.NewCompiler()
	for _, ri := range request.Of(spec, field.NewPath("spec"), classes) {
		ri.Analyze(context.Background(), c, "gpu.nvidia.com", nil)
		fmt.Println(ri.Name, "|", ri.Describe(), "|", ri.IsGPU(), ri.IsMIG(), text.SortedKeys(ri.Profiles))
	}
	// Output:
	// gpu | 2 of class gpu.nvidia.com | true false []
	// mig/small | 1 of class mig.nvidia.com | false true [1g.10gb 1g.5gb]
}
