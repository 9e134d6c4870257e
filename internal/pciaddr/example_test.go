package pciaddr_test

import (
	"fmt"

	"github.com/gpudra/gpudra/internal/pciaddr"
)

func ExampleCanonical() {
	for _, s := range []string{"00000000:B7:00.0", "0000:07:00.0", "0000:07:00"} {
		id, err := pciaddr.Canonical(s)
		fmt.Println(id, err)
	}
	// Output:
	// 0000:b7:00.0 <nil>
	// 0000:07:00.0 <nil>
	//  PCI bus ID "0000:07:00" is not of the form DOMAIN:BUS:DEVICE.FUNCTION
}
