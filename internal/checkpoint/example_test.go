package checkpoint_test

import (
	"fmt"
	"os"

	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/checkpoint"
)

// A kubelet plugin records a claim before it touches hardware, completes it after, and on the
// next start learns what was prepared.
func Example() {
	dir, err := os.MkdirTemp("", "checkpoint-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	store, report, err := checkpoint.Open(dir, checkpoint.WithBootID("boot-1"))
	if err != nil {
		panic(err)
	}
	fmt.Println("fresh:", report.Fresh)

	claim := checkpoint.ClaimState{
		UID: "4f1c", Namespace: "ml", Name: "train", Phase: checkpoint.PrepareStarted,
		Devices: []checkpoint.PreparedDevice{{Request: "gpu", Pool: "node-a", Device: "gpu-0", GPUUUID: "GPU-1234"}},
	}
	if err := store.Put(claim, atomicfile.ProcessCrash); err != nil {
		panic(err)
	}
	// ... CDI spec written, host actions applied ...
	// A power loss reboots the node, which undoes what prepare did: only a process crash
	// must be survived, and that costs no fsync.
	if err := store.Update(atomicfile.ProcessCrash, func(st *checkpoint.State) error {
		c := st.Claims["4f1c"]
		c.Phase = checkpoint.PrepareCompleted
		c.Devices[0].CDIDeviceIDs = []string{"k8s.gpu.nvidia.com/claim=4f1c-gpu-0"}
		st.Claims["4f1c"] = c
		return nil
	}); err != nil {
		panic(err)
	}

	// After a restart in a new boot.
	store, report, err = checkpoint.Open(dir, checkpoint.WithBootID("boot-2"))
	if err != nil {
		panic(err)
	}
	fmt.Println("rebooted:", report.Rebooted, "corrupt:", report.Corrupt)
	for _, c := range store.List() {
		fmt.Println(c.Namespace+"/"+c.Name, c.Phase, c.Devices[0].CDIDeviceIDs, "prepared in", c.BootID)
	}
	// Output:
	// fresh: true
	// rebooted: true corrupt: false
	// ml/train PrepareCompleted [k8s.gpu.nvidia.com/claim=4f1c-gpu-0] prepared in boot-1
}
