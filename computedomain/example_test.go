package computedomain_test

import (
	"fmt"

	"github.com/gpudra/gpudra/computedomain"
)

// The device node a container gets for the default IMEX channel of its domain.
func Example() {
	fmt.Println(computedomain.DriverName, computedomain.ChannelDevicePath(0))
	// Output: compute-domain.nvidia.com /dev/nvidia-caps-imex-channels/channel0
}
