package cdi_test

import (
	"fmt"
	"os"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
)

// Example generates the spec of a claim with one full GPU and one MIG device on a fake driver
// root, writes it, lists the claims that have specs, and removes it.
func Example() {
	dir, err := os.MkdirTemp("", "cdi-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	root, err := cditest.Build(dir+"/driver", cditest.Layout{GPUs: 2})
	if err != nil {
		panic(err)
	}

	inst, err := cdi.Discover(root)
	if err != nil {
		panic(err)
	}
	gen, err := cdi.NewGenerator(inst)
	if err != nil {
		panic(err)
	}
	w, err := cdi.NewWriter(cdi.WithSpecDir(dir + "/cdi"))
	if err != nil {
		panic(err)
	}

	const uid = "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01"
	cs, err := gen.Generate(cdi.ClaimDevices{ClaimUID: uid, Devices: []cdi.Device{
		{Name: "gpu-0", GPUMinor: 0},
		{Name: "gpu-1-mig-1g5gb-19-0", GPUMinor: 1, MIG: &cdi.MIGInstanceIDs{GI: 7, CI: 0}},
	}})
	if err != nil {
		panic(err)
	}
	if _, err := w.Write(cs); err != nil {
		panic(err)
	}
	fmt.Println("cdiVersion:", cs.Spec.Version)
	fmt.Println(cs.DeviceIDs["gpu-0"])
	for _, n := range cs.Spec.Devices[1].ContainerEdits.DeviceNodes {
		fmt.Printf("%s %s %d:%d\n", n.Path, n.Type, n.Major, n.Minor)
	}
	uids, _ := w.List()
	fmt.Println("specs:", uids)
	if err := w.Remove(uid); err != nil {
		panic(err)
	}
	uids, _ = w.List()
	fmt.Println("after remove:", uids)
	// Output:
	// cdiVersion: 0.5.0
	// k8s.gpu.nvidia.com/claim=0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01-gpu-0
	// /dev/nvidia1 c 195:1
	// /dev/nvidia-caps/nvidia-cap201 c 237:201
	// /dev/nvidia-caps/nvidia-cap202 c 237:202
	// specs: [0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01]
	// after remove: []
}

// ExampleNewClaimSpec makes the spec of a claim that got an imaginary accelerator: any kind of
// device, as long as the writer stores specs of the same kind. The version is 0.5.0, the first
// that allows device names starting with a digit, as a claim UID may.
func ExampleNewClaimSpec() {
	w, err := cdi.NewWriter(cdi.WithSpecDir(os.TempDir()), cdi.WithWriterKind("example.com", "accel"))
	if err != nil {
		panic(err)
	}
	edits := specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/accel3"}}}
	cs, err := cdi.NewClaimSpec(w.Kind(), "0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01", specs.ContainerEdits{},
		[]cdi.DeviceEdits{{Name: "accel-3", Edits: edits}})
	if err != nil {
		panic(err)
	}
	fmt.Println(cs.Spec.Version, cs.Spec.Devices[0].Name)
	fmt.Println(cs.DeviceIDs["accel-3"])
	// Output:
	// 0.5.0 0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01-accel-3
	// example.com/accel=0b7a4c4e-7a8e-4f0b-9a52-6c1d2e3f4a01-accel-3
}
