package vfio_test

import (
	"context"
	"fmt"
	"os"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/vfio"
)

// A GPU and its audio function, in IOMMU group 31, go to vfio-pci and back. On a real host the
// binder needs no options: NewSysfsBinder() works on /sys, /dev and /proc.
func Example() {
	dir, err := os.MkdirTemp("", "vfio-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	host, err := gputest.NewPCIHost(dir, gputest.PassthroughGPU("0000:07:00", 31, 0)...)
	if err != nil {
		panic(err)
	}
	b, err := vfio.NewSysfsBinder(vfio.WithFS(host), vfio.WithRoots(host.SysfsRoot(), host.DevRoot(), host.ProcRoot()))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	g, err := b.Bind(ctx, "00000000:07:00.0")
	if err != nil {
		panic(err)
	}
	fmt.Println(g.DevicePath())
	for _, f := range g.Functions {
		fmt.Println(f.Address, f.Driver)
	}
	if err := b.Unbind(ctx, g.GPU); err != nil {
		panic(err)
	}
	fmt.Println(host.Driver("0000:07:00.0"), host.Driver("0000:07:00.1"))
	// Output:
	// /dev/vfio/31
	// 0000:07:00.0 vfio-pci
	// 0000:07:00.1 vfio-pci
	// nvidia snd_hda_intel
}
