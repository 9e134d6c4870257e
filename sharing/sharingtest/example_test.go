package sharingtest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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

// A persisted host: a second FakeHost on the same file (another process, or the same one
// after a restart) sees the daemon the first one started.
func ExampleOpenFakeHost() {
	dir, err := os.MkdirTemp("", "fakehost")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "host.json")
	ctx := context.Background()

	first, err := sharingtest.OpenFakeHost(path, "GPU-0")
	if err != nil {
		panic(err)
	}
	if err := first.SetComputeMode(ctx, "GPU-0", sharing.ComputeModeExclusiveProcess); err != nil {
		panic(err)
	}
	spec := sharing.MPSDaemonSpec{ID: "c1", DeviceUUIDs: []string{"GPU-0"}, ShmDir: "/mps/c1/shm"}
	if err := first.Start(ctx, spec); err != nil {
		panic(err)
	}

	second, err := sharingtest.OpenFakeHost(path)
	if err != nil {
		panic(err)
	}
	running, _ := second.Running(ctx, spec)
	fmt.Println(running, second.State().Mounts)
	// Output: true map[/mps/c1/shm:1073741824]
}
