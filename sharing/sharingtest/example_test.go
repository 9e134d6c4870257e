package sharingtest_test

import (
	"context"
	"fmt"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

func ExampleNewFakeHost() {
	host := sharingtest.NewFakeHost("GPU-0")
	if err := host.SetComputeMode(context.Background(), "GPU-0", sharing.ComputeModeExclusiveProcess); err != nil {
		panic(err)
	}
	fmt.Println(host.State().ComputeModes["GPU-0"])
	// Output: EXCLUSIVE_PROCESS
}
