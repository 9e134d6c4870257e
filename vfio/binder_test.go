package vfio_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/vfio"
)

const (
	gpuAddr   = "0000:07:00.0"
	audioAddr = "0000:07:00.1"
)

// newHost returns a host with one GPU and its audio function in IOMMU group 31, plus a second
// GPU in group 32, and a binder on it.
func newHost(t *testing.T, extra []gputest.PCIFunction, opts ...vfio.Option) (*gputest.PCIHost, *vfio.SysfsBinder) {
	t.Helper()
	funcs := append(gputest.PassthroughGPU("0000:07:00", 31, 0), gputest.PassthroughGPU("0000:0f:00", 32, 1)...)
	h, err := gputest.NewPCIHost(t.TempDir(), append(funcs, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]vfio.Option{vfio.WithFS(h), vfio.WithRoots(h.SysfsRoot(), h.DevRoot(), h.ProcRoot()),
		vfio.WithDeviceTimeout(time.Second, time.Millisecond)}, opts...)
	b, err := vfio.NewSysfsBinder(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h, b
}

type hostState struct {
	Drivers, Overrides map[string]string
	Nodes              []string
}

func stateOf(t *testing.T, h *gputest.PCIHost, addrs ...string) hostState {
	t.Helper()
	st := hostState{Drivers: map[string]string{}, Overrides: map[string]string{}}
	for _, a := range addrs {
		st.Drivers[a] = h.Driver(a)
		st.Overrides[a] = h.Override(a)
	}
	entries, err := os.ReadDir(filepath.Join(h.DevRoot(), "vfio"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		st.Nodes = append(st.Nodes, e.Name())
	}
	return st
}

var (
	native = hostState{
		Drivers:   map[string]string{gpuAddr: "nvidia", audioAddr: "snd_hda_intel"},
		Overrides: map[string]string{gpuAddr: "", audioAddr: ""},
		Nodes:     []string{"vfio"},
	}
	bound = hostState{
		Drivers:   map[string]string{gpuAddr: "vfio-pci", audioAddr: "vfio-pci"},
		Overrides: map[string]string{gpuAddr: "vfio-pci", audioAddr: "vfio-pci"},
		Nodes:     []string{"31", "vfio"},
	}
)

func TestVFIOBindUnbind(t *testing.T) {
	ctx := context.Background()
	h, b := newHost(t, nil)
	g, err := b.Bind(ctx, "00000000:07:00.0") // NVML's spelling
	if err != nil {
		t.Fatal(err)
	}
	want := &vfio.Group{ID: 31, GPU: gpuAddr, Functions: []vfio.Function{
		{Address: gpuAddr, Class: "0x030200", Driver: "vfio-pci", Override: "vfio-pci"},
		{Address: audioAddr, Class: "0x040300", Driver: "vfio-pci", Override: "vfio-pci"},
	}, Major: gputest.VFIOMajor, Minor: 31}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("Bind returned (-want +got):\n%s", diff)
	}
	if g.DevicePath() != "/dev/vfio/31" || !g.Bound() {
		t.Errorf("DevicePath() = %q, Bound() = %v; want /dev/vfio/31, true", g.DevicePath(), g.Bound())
	}
	if diff := cmp.Diff(bound, stateOf(t, h, gpuAddr, audioAddr)); diff != "" {
		t.Errorf("host after Bind (-want +got):\n%s", diff)
	}
	if h.Driver("0000:0f:00.0") != "nvidia" {
		t.Errorf("the other GPU is on %q, want nvidia", h.Driver("0000:0f:00.0"))
	}
	n := len(h.Writes())
	if _, err := b.Bind(ctx, gpuAddr); err != nil || len(h.Writes()) != n {
		t.Errorf("second Bind: err %v, %d writes; want nil, none", err, len(h.Writes())-n)
	}
	if err := b.Unbind(ctx, gpuAddr); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(native, stateOf(t, h, gpuAddr, audioAddr)); diff != "" {
		t.Errorf("host after Unbind (-want +got):\n%s", diff)
	}
	n = len(h.Writes())
	if err := b.Unbind(ctx, gpuAddr); err != nil || len(h.Writes()) != n {
		t.Errorf("second Unbind: err %v, %d writes; want nil, none", err, len(h.Writes())-n)
	}
}

func TestVFIOBindWrites(t *testing.T) {
	h, b := newHost(t, nil)
	if _, err := b.Bind(context.Background(), gpuAddr); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"sys/bus/pci/devices/0000:07:00.0/driver_override: vfio-pci",
		"sys/bus/pci/devices/0000:07:00.0/driver/unbind: 0000:07:00.0",
		"sys/bus/pci/drivers_probe: 0000:07:00.0",
		"sys/bus/pci/devices/0000:07:00.1/driver_override: vfio-pci",
		"sys/bus/pci/devices/0000:07:00.1/driver/unbind: 0000:07:00.1",
		"sys/bus/pci/drivers_probe: 0000:07:00.1",
	}
	if diff := cmp.Diff(want, h.Writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}

func TestVFIOBridgeLeftAlone(t *testing.T) {
	bridge := gputest.PCIFunction{Address: "0000:06:00.0", Class: "0x060400", Driver: "pcieport", IOMMUGroup: 31, Minor: -1}
	h, b := newHost(t, []gputest.PCIFunction{bridge})
	g, err := b.Bind(context.Background(), gpuAddr)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Bound() || h.Driver(bridge.Address) != "pcieport" || h.Override(bridge.Address) != "" {
		t.Errorf("bridge: Bound() %v, driver %q, override %q; want true, pcieport, none", g.Bound(), h.Driver(bridge.Address), h.Override(bridge.Address))
	}
}

func TestVFIORefuses(t *testing.T) {
	nic := gputest.PCIFunction{Address: "0000:07:00.2", Class: "0x020000", Driver: "mlx5_core", IOMMUGroup: 31, Minor: -1}
	for _, tt := range []struct {
		name    string
		addr    string
		extra   []gputest.PCIFunction
		setup   func(*gputest.PCIHost) error
		check   func(context.Context, *vfio.Group) error
		want    string
		inUse   bool
		skipGPU bool
	}{
		{name: "MIG instances", addr: gpuAddr, setup: func(h *gputest.PCIHost) error { return h.AddMIGInstance(0, 7) },
			want: "has MIG GPU instances (gi7", inUse: true},
		{name: "open handle", addr: gpuAddr, setup: func(h *gputest.PCIHost) error { return h.OpenDevice(4242, 5, 0) },
			want: "/dev/nvidia0 is open in process(es) 4242", inUse: true},
		{name: "foreign driver in the group", addr: gpuAddr, extra: []gputest.PCIFunction{nic},
			want: "0000:07:00.2 bound to mlx5_core", inUse: true},
		{name: "caller's check", addr: gpuAddr, check: func(context.Context, *vfio.Group) error {
			return errors.New("claim abc is prepared on it: " + vfio.ErrInUse.Error())
		}, want: "claim abc is prepared on it"},
		{name: "not a PCI address", addr: "../../etc/passwd", want: "is not of the form DOMAIN:BUS:DEVICE.FUNCTION"},
		{name: "no IOMMU group", addr: "0000:99:00.0", want: "no IOMMU group (is the IOMMU on?"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var opts []vfio.Option
			if tt.check != nil {
				opts = append(opts, vfio.WithInUseCheck(tt.check))
			}
			h, b := newHost(t, tt.extra, opts...)
			if tt.setup != nil {
				if err := tt.setup(h); err != nil {
					t.Fatal(err)
				}
			}
			_, err := b.Bind(context.Background(), tt.addr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Bind() error = %v, want one containing %q", err, tt.want)
			}
			if tt.inUse != errors.Is(err, vfio.ErrInUse) {
				t.Errorf("errors.Is(err, ErrInUse) = %v, want %v", !tt.inUse, tt.inUse)
			}
			if len(h.Writes()) != 0 {
				t.Errorf("a refused Bind wrote %q", h.Writes())
			}
		})
	}
}

func TestVFIORollback(t *testing.T) {
	boom := errors.New("injected")
	for _, tt := range []struct {
		name, file, addr string
		n                int
	}{
		{"GPU override", "driver_override", gpuAddr, 1},
		{"GPU unbind", "unbind", gpuAddr, 1},
		{"GPU probe", "drivers_probe", gpuAddr, 1},
		{"audio override", "driver_override", audioAddr, 1},
		{"audio unbind", "unbind", audioAddr, 1},
		{"audio probe", "drivers_probe", audioAddr, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, b := newHost(t, nil)
			h.FailWrite(tt.file, tt.addr, tt.n, boom)
			_, err := b.Bind(context.Background(), gpuAddr)
			if !errors.Is(err, boom) {
				t.Fatalf("Bind() error = %v, want the injected one", err)
			}
			if diff := cmp.Diff(native, stateOf(t, h, gpuAddr, audioAddr)); diff != "" {
				t.Errorf("host after a failed Bind (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVFIOModuleNotLoaded(t *testing.T) {
	h, b := newHost(t, nil)
	h.SetVFIOLoaded(false)
	_, err := b.Bind(context.Background(), gpuAddr)
	if err == nil || !strings.Contains(err.Error(), "is the vfio-pci module loaded?") {
		t.Fatalf("Bind() error = %v, want one naming the vfio-pci module", err)
	}
	if diff := cmp.Diff(native, stateOf(t, h, gpuAddr, audioAddr)); diff != "" {
		t.Errorf("host after a failed Bind (-want +got):\n%s", diff)
	}
}

// A step hook that fails at each write in turn stands for a crash there: a second Bind or an
// Unbind from whatever state it left ends bound or native.
func TestVFIOInterruptedAtEveryStep(t *testing.T) {
	for step := 1; step <= 6; step++ {
		for _, then := range []string{"bind", "unbind"} {
			h, _ := newHost(t, nil)
			n := 0
			crash := errors.New("crash")
			hook := func(vfio.Step, string) error {
				if n++; n >= step { // the process is dead from here on: no rollback either
					return crash
				}
				return nil
			}
			b := newBinderOn(t, h, vfio.WithStepHook(hook))
			if _, err := b.Bind(context.Background(), gpuAddr); !errors.Is(err, crash) {
				t.Fatalf("step %d: Bind() error = %v, want the crash", step, err)
			}
			again := newBinderOn(t, h)
			want := native
			var err error
			if then == "bind" {
				_, err = again.Bind(context.Background(), gpuAddr)
				want = bound
			} else {
				err = again.Unbind(context.Background(), gpuAddr)
			}
			if err != nil {
				t.Fatalf("step %d: %s after the crash: %v", step, then, err)
			}
			if diff := cmp.Diff(want, stateOf(t, h, gpuAddr, audioAddr)); diff != "" {
				t.Errorf("step %d, then %s: host (-want +got):\n%s", step, then, diff)
			}
		}
	}
}

func TestVFIOUnbindRetriesAfterFailedProbe(t *testing.T) {
	h, b := newHost(t, nil)
	ctx := context.Background()
	if _, err := b.Bind(ctx, gpuAddr); err != nil {
		t.Fatal(err)
	}
	h.FailWrite("drivers_probe", gpuAddr, 1, errors.New("injected"))
	if err := b.Unbind(ctx, gpuAddr); err == nil {
		t.Fatal("Unbind() succeeded with a failing probe")
	}
	if h.Driver(gpuAddr) != "" {
		t.Fatalf("GPU on %q after the failed probe, want unbound", h.Driver(gpuAddr))
	}
	if err := b.Unbind(ctx, gpuAddr); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(native, stateOf(t, h, gpuAddr, audioAddr)); diff != "" {
		t.Errorf("host after the retried Unbind (-want +got):\n%s", diff)
	}
}

func TestVFIONewSysfsBinderRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		opt  vfio.Option
		want string
	}{
		{"relative root", vfio.WithRoots("sys", "/dev", "/proc"), `sysfs root "sys": must be an absolute path`},
		{"driver path", vfio.WithNativeDriver("../nvidia"), `native driver "../nvidia"`},
		{"timeout", vfio.WithDeviceTimeout(0, time.Second), "both must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := vfio.NewSysfsBinder(tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewSysfsBinder() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func newBinderOn(t *testing.T, h *gputest.PCIHost, opts ...vfio.Option) *vfio.SysfsBinder {
	t.Helper()
	b, err := vfio.NewSysfsBinder(append([]vfio.Option{vfio.WithFS(h), vfio.WithRoots(h.SysfsRoot(), h.DevRoot(), h.ProcRoot()),
		vfio.WithDeviceTimeout(time.Second, time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A function that was on vfio-pci before a Bind that fails stays there: rollback restores only
// what Bind changed.
func TestVFIORollbackKeepsEarlierVFIO(t *testing.T) {
	usb := gputest.PCIFunction{Address: "0000:07:00.2", Class: "0x0c0330", Driver: "xhci_hcd", IOMMUGroup: 31, Minor: -1}
	h, err := gputest.NewPCIHost(t.TempDir(), append(gputest.PassthroughGPU("0000:07:00", 31, 0), usb)...)
	if err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(h.SysfsRoot(), "bus/pci/devices", audioAddr)
	for _, w := range [][2]string{{dev + "/driver_override", "vfio-pci"}, {dev + "/driver/unbind", audioAddr}, {filepath.Join(h.SysfsRoot(), "bus/pci/drivers_probe"), audioAddr}} {
		if err := h.WriteFile(w[0], []byte(w[1])); err != nil {
			t.Fatal(err)
		}
	}
	h.FailWrite("drivers_probe", usb.Address, 1, errors.New("injected"))
	if _, err := newBinderOn(t, h).Bind(context.Background(), gpuAddr); err == nil {
		t.Fatal("Bind() succeeded with a failing probe")
	}
	got := map[string]string{gpuAddr: h.Driver(gpuAddr), audioAddr: h.Driver(audioAddr), usb.Address: h.Driver(usb.Address)}
	want := map[string]string{gpuAddr: "nvidia", audioAddr: "vfio-pci", usb.Address: "xhci_hcd"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("drivers after a failed Bind (-want +got):\n%s", diff)
	}
}

func TestVFIONoDeviceNode(t *testing.T) {
	h, b := newHost(t, nil)
	h.SetVFIODeviceNodes(false)
	_, err := b.Bind(context.Background(), gpuAddr)
	if err == nil || !strings.Contains(err.Error(), "/vfio/31 did not appear within") {
		t.Fatalf("Bind() error = %v, want one saying /dev/vfio/31 did not appear", err)
	}
	if diff := cmp.Diff(native, stateOf(t, h, gpuAddr, audioAddr)); diff != "" {
		t.Errorf("host after a failed Bind (-want +got):\n%s", diff)
	}
}

// An unbind killed at each of its writes leaves the group half given back; the next Unbind
// finishes it.
func TestVFIOUnbindInterruptedAtEveryStep(t *testing.T) {
	for step := 1; step <= 6; step++ {
		h, b := newHost(t, nil)
		if _, err := b.Bind(context.Background(), gpuAddr); err != nil {
			t.Fatal(err)
		}
		n := 0
		crash := errors.New("crash")
		dying := newBinderOn(t, h, vfio.WithStepHook(func(vfio.Step, string) error {
			if n++; n >= step {
				return crash
			}
			return nil
		}))
		if err := dying.Unbind(context.Background(), gpuAddr); !errors.Is(err, crash) {
			t.Fatalf("step %d: Unbind() error = %v, want the crash", step, err)
		}
		if err := newBinderOn(t, h).Unbind(context.Background(), gpuAddr); err != nil {
			t.Fatalf("step %d: Unbind after the crash: %v", step, err)
		}
		if diff := cmp.Diff(native, stateOf(t, h, gpuAddr, audioAddr)); diff != "" {
			t.Errorf("step %d: host (-want +got):\n%s", step, diff)
		}
	}
}
