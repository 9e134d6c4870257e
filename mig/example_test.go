package mig_test

import (
	"errors"
	"fmt"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
)

// Validate a textual layout on an A100-40GB and draw where its instances go.
func Example() {
	m, err := mig.Lookup("NVIDIA A100-SXM4-40GB")
	if err != nil {
		panic(err)
	}
	layout, err := mig.ParseLayout("3g.20gb,2g.10gb,1g.5gb,1g.5gb")
	if err != nil {
		panic(err)
	}
	placed, err := mig.Validate(m, layout)
	if err != nil {
		panic(err)
	}
	fmt.Println(mig.FormatLayout(placed))
	fmt.Print(mig.Diagram(m, placed))

	_, err = mig.Validate(m, []mig.Instance{mig.At("3g.20gb", 0), mig.At("2g.10gb", 2)})
	var ve *mig.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Kind, ve.Slices)
		fmt.Println(err)
	}
	// Output:
	// 3g.20gb@4,2g.10gb@0,1g.5gb@2,1g.5gb@3
	// A100-SXM4-40GB: 8 memory slices, 7 compute slices
	//            | 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 |
	// 3g.20gb@4  |   |   |   |   |###############|
	// 2g.10gb@0  |#######|   |   |   |   |   |   |
	// 1g.5gb@2   |   |   |###|   |   |   |   |   |
	// 1g.5gb@3   |   |   |   |###|   |   |   |   |
	// free memory slices: none
	// overlap [2 3]
	// A100-SXM4-40GB: instance #0 3g.20gb@0 overlaps instance #1 2g.10gb@2 on memory slices 2,3
}

// Parse a profile name and format it back.
func ExampleParseProfile() {
	p, err := mig.ParseProfile("1c.3g.20gb")
	fmt.Println(p.C, p.G, p.GB, p.GPUInstance(), err)
	_, err = mig.ParseProfile("1g.5GB")
	fmt.Println(err)
	// Output:
	// 1 3 20 3g.20gb <nil>
	// invalid MIG profile "1g.5GB" at byte 4: expected "gb" after the memory size, found 'G'
}

// Read the MIG model a GPU reports through NVML and log where the built-in catalog differs: here
// a fake A100 whose driver shrank 1g.5gb to 4.50 GiB.
func ExampleDeviceModel() {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIGProfileEdit("1g.5gb", func(p *mig.GIProfile) { p.MemoryMiB = 4608 }))
	if err != nil {
		panic(err)
	}
	live, diffs, err := mig.DeviceModel(machine.Device(0))
	if err != nil {
		panic(err)
	}
	p, _ := live.Profile("1g.5gb")
	fmt.Println(live.Name, p.Name, p.MemoryMiB, p.Sources.Memory)
	for _, d := range diffs {
		fmt.Println(d)
	}
	// Output:
	// A100-SXM4-40GB 1g.5gb 4608 device
	// profiles[1g.5gb].memoryMiB: table 4864, live 4608
}

// Turn recorded nvidia-smi output into a model and compare it with the catalog.
func ExampleModelFromSMI() {
	rows, err := mig.ParseSMIProfiles(`
|   0  MIG 1g.24gb         14     4/4        23.62      No     46     1     1   |
|                                                               1     1     0   |`)
	if err != nil {
		panic(err)
	}
	placements, err := mig.ParseSMIPlacements("GPU  0 Profile ID 14 Placements: {0,3,6,9}:3")
	if err != nil {
		panic(err)
	}
	m, err := mig.ModelFromSMI("RTX PRO 6000 Blackwell", 97887, 0, rows, placements)
	if err != nil {
		panic(err)
	}
	p := m.Profiles[0]
	fmt.Println(p.Name, p.ID, p.MemoryMiB, p.Multiprocessors, p.Placements, p.Sources.Placements)
	// Output:
	// 1g.24gb 14 24192 46 [{0 3} {3 3} {6 3} {9 3}] recorded
}

// ExampleInstanceManager creates MIG instances on one GPU of a fake DGX A100 where mig.Plan puts
// them, beside an instance already there, and destroys them again: what a kubelet plugin with
// dynamic MIG does at prepare and unprepare (draplugin does it for you).
func ExampleInstanceManager() {
	machine, err := gputest.New("dgx-a100-40gb", gputest.WithMIG(0, "3g.20gb@4"))
	if err != nil {
		panic(err)
	}
	im, err := mig.NewInstanceManager(machine.Device(0), nil) // nil: the model of the GPU's product name
	if err != nil {
		panic(err)
	}
	current, err := im.Current()
	if err != nil {
		panic(err)
	}
	placed, err := mig.Plan(im.Model(), current, []string{"1g.5gb", "2g.10gb"})
	if err != nil {
		panic(err)
	}
	created, err := im.Apply(placed)
	if err != nil {
		panic(err)
	}
	for _, c := range created {
		fmt.Println("created", c.Instance, "reused:", c.Reused)
	}
	if err := im.Remove(placed); err != nil {
		panic(err)
	}
	left, _ := im.Current()
	fmt.Println("left:", mig.FormatLayout(left))
	// Output:
	// created 1g.5gb@2 reused: false
	// created 2g.10gb@0 reused: false
	// left: 3g.20gb@4
}
