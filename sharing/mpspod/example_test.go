package mpspod_test

import (
	"fmt"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/mpspod"
)

// The pod that runs a claim's MPS control daemon on node-1.
func ExampleDaemons_Pod() {
	d, err := mpspod.New(mpspod.Config{Client: fake.NewClientset(), Namespace: "gpu-dra-driver", NodeName: "node-1",
		Image: "ghcr.io/gpudra/gpu-dra-driver:v0.1.0", Args: []string{"--driver-root=/driver-root"}})
	if err != nil {
		panic(err)
	}
	dir := "/var/lib/kubelet/plugins/gpu.nvidia.com/mps/3f2c6a1e-8d4b-4c2a-9e7f-5b1d0c9a8e21"
	pod, err := d.Pod(sharing.MPSDaemonSpec{ID: "3f2c6a1e-8d4b-4c2a-9e7f-5b1d0c9a8e21", DeviceUUIDs: []string{"GPU-0"},
		Dir: dir, PipeDir: dir + "/pipe", LogDir: dir + "/log", ShmDir: dir + "/shm"})
	if err != nil {
		panic(err)
	}
	fmt.Println(pod.Name)
	fmt.Println(pod.Spec.NodeName, pod.Spec.RestartPolicy, pod.Spec.Containers[0].Command)
	// Output:
	// mps-control-daemon-3f2c6a1e-8d4b-4c2a-9e7f-5b1d0c9a8e21-35971be6
	// node-1 Always [gpu-dra-driver mps-daemon]
}
