package mig_test

import (
	"errors"
	"fmt"

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
