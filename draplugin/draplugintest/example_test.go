package draplugintest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
)

// A driver test on a fake DGX A100 with dynamic MIG: a claim for a 1g.5gb partition is
// allocated by the scheduler's allocator, prepared as kubelet would, and unprepared.
func Example() {
	ctx := context.Background()
	node, err := draplugintest.NewNode("dgx-a100-40gb", draplugintest.WithDynamicMIG())
	if err != nil {
		panic(err)
	}
	defer node.Close()
	plugin, err := node.NewPlugin(ctx)
	if err != nil {
		panic(err)
	}
	claim, err := node.Allocate(ctx, draplugintest.Claim("inference", "mig.nvidia.com",
		"device.attributes['gpu.nvidia.com'].profile == '1g.5gb'", ""))
	if err != nil {
		panic(err)
	}
	devices, err := draplugintest.Prepare(ctx, plugin, claim)
	if err != nil {
		panic(err)
	}
	specs, _ := node.Specs()
	fmt.Println(devices[0].DeviceName, "MIG instances:", node.MIGInstances(), "specs:", len(specs))

	if err := draplugintest.Unprepare(ctx, plugin, claim); err != nil {
		panic(err)
	}
	specs, _ = node.Specs()
	fmt.Println("after unprepare: MIG instances:", len(node.MIGInstances()), "specs:", len(specs), "host clean:", node.HostClean() == nil)
	// Output:
	// gpu-0-mig-1g5gb-19-6 MIG instances: [0:1g.5gb@6] specs: 1
	// after unprepare: MIG instances: 0 specs: 0 host clean: true
}

// ExampleNode_Serve tests a driver the way kubelet uses it: the plugin serves its real gRPC
// sockets (registration, then DRA) and a fake kubelet prepares a claim for a time-sliced GPU
// of a fake 8×L4 server through them. The fake host records the time slice nvidia-smi would set.
func ExampleNode_Serve() {
	ctx := context.Background()
	node, err := draplugintest.NewNode("l4x8")
	if err != nil {
		panic(err)
	}
	defer node.Close()
	plugin, err := node.NewPlugin(ctx)
	if err != nil {
		panic(err)
	}
	claim, err := node.Allocate(ctx, draplugintest.Claim("shared", "gpu.nvidia.com", "",
		`{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
		  "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}`))
	if err != nil {
		panic(err)
	}
	srv, err := node.Serve(ctx, plugin, draplugin.StartConfig{}, claim)
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	fmt.Println("registered:", srv.Info.Name)

	resp, err := srv.Prepare(ctx, claim)
	if err != nil {
		panic(err)
	}
	r := resp.Claims[string(claim.UID)]
	if r.Error != "" {
		panic(r.Error)
	}
	fmt.Println(r.Devices[0].DeviceName, r.Devices[0].CdiDeviceIds)
	gpu0 := node.Inventory.GPUs[0].UUID
	fmt.Println("time slice:", node.Host.State().TimeSlices[gpu0])

	if _, err := srv.Unprepare(ctx, claim); err != nil {
		panic(err)
	}
	fmt.Println("after unprepare: time slice:", node.Host.State().TimeSlices[gpu0], "host clean:", node.HostClean() == nil)
	// Output:
	// registered: gpu.nvidia.com
	// gpu-0 [k8s.gpu.nvidia.com/claim=00000000-0000-4000-8000-026ee7d87df4-gpu-0]
	// time slice: 3
	// after unprepare: time slice: 0 host clean: true
}

// ExampleCrashAt kills a prepare right after it created a dynamic MIG instance, as a crash of
// the plugin process would, and restarts the plugin on the same node: reconciliation rolls the
// interrupted prepare back, and kubelet's retry then prepares the claim from scratch.
func ExampleCrashAt() {
	ctx := context.Background()
	node, err := draplugintest.NewNode("dgx-a100-40gb", draplugintest.WithDynamicMIG())
	if err != nil {
		panic(err)
	}
	defer node.Close()
	claim, err := node.Allocate(ctx, draplugintest.Claim("crashy", "mig.nvidia.com",
		"device.attributes['gpu.nvidia.com'].profile == '1g.5gb'", ""))
	if err != nil {
		panic(err)
	}

	crash := draplugintest.CrashAt(claim.UID, 2) // the second crash point of the claim's prepare
	plugin, err := node.NewPlugin(ctx, func(cfg *draplugin.Config) { cfg.TestHooks = crash.Hooks() })
	if err != nil {
		panic(err)
	}
	_, err = draplugintest.Prepare(ctx, plugin, claim)
	fmt.Println(errors.Is(err, draplugintest.ErrCrash), crash.Seen(), node.MIGInstances())

	restarted, err := node.NewPlugin(ctx) // a new process on the same node
	if err != nil {
		panic(err)
	}
	report, err := restarted.Reconcile(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("rolled back:", report.RolledBack, "MIG instances:", node.MIGInstances())

	devices, err := draplugintest.Prepare(ctx, restarted, claim)
	if err != nil {
		panic(err)
	}
	fmt.Println(devices[0].DeviceName, node.MIGInstances())
	// Output:
	// true [prepare-started mig-created] [0:1g.5gb@6]
	// rolled back: [default/crashy (00000000-0000-4000-8000-a5c6b791bb53)] MIG instances: []
	// gpu-0-mig-1g5gb-19-6 [0:1g.5gb@6]
}
