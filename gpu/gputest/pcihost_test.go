package gputest_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
)

// The fake kernel: writes move driver bindings, /dev/vfio/<group> and the nvidia procfs entry
// follow them, and an injected failure changes nothing.
func TestPCIHostSimulatesDriverBinding(t *testing.T) {
	h, err := gputest.NewPCIHost(t.TempDir(), gputest.PassthroughGPU("0000:07:00", 31, 0)...)
	if err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(h.SysfsRoot(), "bus/pci/devices/0000:07:00.0")
	probe := filepath.Join(h.SysfsRoot(), "bus/pci/drivers_probe")
	info := filepath.Join(h.ProcRoot(), "driver/nvidia/gpus/0000:07:00.0/information")
	node := filepath.Join(h.DevRoot(), "vfio/31")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	type state struct {
		Driver, Override string
		Info, Node       bool
	}
	now := func() state {
		return state{h.Driver("0000:07:00.0"), h.Override("0000:07:00.0"), exists(info), exists(node)}
	}
	boom := errors.New("injected")
	h.FailWrite("unbind", "0000:07:00.0", 2, boom)
	steps := []struct {
		file, data string
		err        error
		want       state
	}{
		{dev + "/driver_override", "vfio-pci", nil, state{"nvidia", "vfio-pci", true, false}},
		{dev + "/driver/unbind", "0000:07:00.0", nil, state{"", "vfio-pci", false, false}},
		{probe, "0000:07:00.0", nil, state{"vfio-pci", "vfio-pci", false, true}},
		{dev + "/driver/unbind", "0000:07:00.0", boom, state{"vfio-pci", "vfio-pci", false, true}},
		{filepath.Join(h.SysfsRoot(), "bus/pci/drivers/vfio-pci/unbind"), "0000:07:00.0", nil, state{"", "vfio-pci", false, false}},
		{dev + "/driver_override", "\n", nil, state{"", "", false, false}},
		{probe, "0000:07:00.0", nil, state{"nvidia", "", true, false}},
	}
	for i, s := range steps {
		if err := h.WriteFile(s.file, []byte(s.data)); !errors.Is(err, s.err) {
			t.Fatalf("step %d: WriteFile(%s) = %v, want %v", i, s.file, err, s.err)
		}
		if diff := cmp.Diff(s.want, now()); diff != "" {
			t.Fatalf("step %d (%s %q) (-want +got):\n%s", i, filepath.Base(s.file), s.data, diff)
		}
	}
	if n := len(h.Writes()); n != len(steps) {
		t.Errorf("Writes() has %d entries, want %d", n, len(steps))
	}
}

// A host made again on its directory continues its bindings, as hardware outlives the process
// that bound it.
func TestPCIHostContinuesItsTree(t *testing.T) {
	dir := t.TempDir()
	funcs := gputest.PassthroughGPU("0000:07:00", 31, 0)
	h, err := gputest.NewPCIHost(dir, funcs...)
	if err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(h.SysfsRoot(), "bus/pci/devices/0000:07:00.0")
	for _, w := range [][2]string{{dev + "/driver_override", "vfio-pci"}, {dev + "/driver/unbind", "0000:07:00.0"}, {filepath.Join(h.SysfsRoot(), "bus/pci/drivers_probe"), "0000:07:00.0"}} {
		if err := h.WriteFile(w[0], []byte(w[1])); err != nil {
			t.Fatal(err)
		}
	}
	again, err := gputest.NewPCIHost(dir, funcs...)
	if err != nil {
		t.Fatal(err)
	}
	got := [3]string{again.Driver("0000:07:00.0"), again.Override("0000:07:00.0"), again.Driver("0000:07:00.1")}
	if want := [3]string{"vfio-pci", "vfio-pci", "snd_hda_intel"}; got != want {
		t.Errorf("continued host: GPU driver, override, audio driver %q, want %q", got, want)
	}
	if err := again.Native(); err == nil {
		t.Error("Native() = nil with the GPU on vfio-pci")
	}
}
