package standin

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// buildRoot builds the stand-in into <root>/usr/lib64 of a fresh driver root, or skips the test
// where there is no C compiler. One process loads one libnvidia-ml.so.1 (the dynamic loader
// matches the soname), so every check of a test binary shares the root this returns.
func buildRoot(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc: the stand-in NVML library cannot be built")
	}
	ctx := context.Background()
	hdr, err := HeaderDir(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if _, err := Build(ctx, hdr, filepath.Join(root, "usr", "lib64")); err != nil {
		t.Fatal(err)
	}
	return root
}

// install writes machine m's state beside the stand-in in root.
func install(t *testing.T, root string, m *gputest.Machine) {
	t.Helper()
	s, err := FromMachine(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(filepath.Join(root, "usr", "lib64")); err != nil {
		t.Fatal(err)
	}
}

// enumerate opens NVML from the driver root as the reference driver's --nvml=real does and
// enumerates it with gpu/nvmlgpu.
func enumerate(t *testing.T, root string) *gpu.Inventory {
	t.Helper()
	sess, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	inv, err := sess.Enumerate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nvmltopology.Discover(sess.Interface(), nvmltopology.WithoutSysfs()); err != nil {
		t.Errorf("topology discovery on the stand-in: %v", err)
	}
	return inv
}

// want enumerates the gputest machine itself: the second source the stand-in is compared with.
func want(t *testing.T, m *gputest.Machine) *gpu.Inventory {
	t.Helper()
	inv, err := nvmlgpu.Enumerate(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

var inventoryOpts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) }),
}

// TestStandInEnumeratesLikeGputest loads the stand-in through the project's own NVML
// enumeration (gpu/nvmlgpu, real go-nvml, dlopen from a driver root) and compares the inventory
// with the enumeration of the gputest machine its state was written from, then drives MIG
// through the plugin's own MIG controller and checks the changes land in the state file and
// survive a new NVML session.
func TestStandInEnumeratesLikeGputest(t *testing.T) {
	root := buildRoot(t)
	// With no state file beside it the library's Init fails as NVML does without a driver, and
	// OpenReal reports it instead of dying.
	if _, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(root)); !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		t.Errorf("OpenReal without a state file: %v, want NVML's driver-not-loaded", err)
	}
	for _, c := range []struct {
		machine string
		opts    []gputest.Option
	}{
		{machine: "dgx-a100-40gb"},
		{machine: "dgx-a100-40gb", opts: []gputest.Option{gputest.WithMIGConfig("all-balanced")}},
		{machine: "dgx-h100", opts: []gputest.Option{gputest.WithMIG(1, "3g.40gb", "1g.10gb")}},
		{machine: "a30x4"},
		{machine: "l4x8"},
		{machine: "rtx-pro-6000x4", opts: []gputest.Option{gputest.WithMIG(0, "2g.48gb")}},
	} {
		m, err := gputest.New(c.machine, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		install(t, root, m)
		got := enumerate(t, root)
		if migDevices(got) == 0 && len(c.opts) > 0 {
			t.Errorf("%s with MIG devices: the stand-in reports none", c.machine)
		}
		if diff := cmp.Diff(want(t, m), got, inventoryOpts); diff != "" {
			t.Errorf("%s %d options: stand-in inventory differs from the gputest machine's (-gputest +stand-in):\n%s", c.machine, len(c.opts), diff)
		}
	}
	t.Run("dynamic MIG", func(t *testing.T) { checkDynamicMIG(t, root) })
	t.Run("health events and compute mode", func(t *testing.T) { checkEventsAndComputeMode(t, root) })
}

// checkDynamicMIG keeps the state in another directory, linked from beside the library, creates a 1g.5gb instance with the plugin's MIG controller on both the
// stand-in and the gputest machine, compares the inventories (MIG device UUIDs aside: each
// source names new devices its own way), checks the state file holds the instance, and
// destroys it again.
func checkDynamicMIG(t *testing.T, root string) {
	ctx := context.Background()
	m, err := gputest.New("dgx-a100-40gb", gputest.WithMIGAll())
	if err != nil {
		t.Fatal(err)
	}
	// The state elsewhere, linked from beside the library, as for a read-only driver root.
	stateDir := t.TempDir()
	s, err := FromMachine(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(stateDir); err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(root, "usr", "lib64", StateName)
	if err := os.Remove(beside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(stateDir, StateName), beside); err != nil {
		t.Fatal(err)
	}
	sess, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	gpuUUID := want(t, m).GPUs[3].UUID
	pl := mig.Placement{Start: 2, Size: 1}
	for _, ctl := range []draplugin.MIGController{draplugin.NewNVMLMIGController(m, mig.Lookup), draplugin.NewNVMLMIGController(sess.Interface(), mig.Lookup)} {
		in, err := ctl.Create(ctx, gpuUUID, "1g.5gb", pl)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(in.UUID, "MIG-") {
			t.Errorf("created MIG device UUID %q", in.UUID)
		}
	}
	// The only session closes: the library forgets its state, and the next one (as a restarted
	// plugin's) reads the instance back from the file.
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	noMIGUUID := cmp.Transformer("noMIGUUID", func(d gpu.MIGDevice) gpu.MIGDevice { d.UUID = ""; return d })
	if diff := cmp.Diff(want(t, m), enumerate(t, root), inventoryOpts, noMIGUUID); diff != "" {
		t.Errorf("after creating 1g.5gb on GPU 3 (-gputest +stand-in):\n%s", diff)
	}
	if fi, err := os.Lstat(beside); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link beside the library was replaced (%v): the library must write the state where it points", err)
	}
	st, err := ReadState(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if g := st.GPUs[3]; len(g.GPUInstances) != 1 || len(g.ComputeInstances) != 1 || g.GPUInstances[0].Start != 2 {
		t.Errorf("state file after Create: GPU instances %+v, compute instances %+v; want one 1g.5gb at 2", g.GPUInstances, g.ComputeInstances)
	}
	if sess, err = nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(root)); err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// A second GPU instance on the same slice: both sources refuse it alike.
	for _, lib := range []nvml.Interface{m, sess.Interface()} {
		if ret := createAgain(lib, gpuUUID, pl); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
			t.Errorf("a second 1g.5gb at %d: %v, want %v", pl.Start, ret, nvml.ERROR_INSUFFICIENT_RESOURCES)
		}
	}
	ctl := draplugin.NewNVMLMIGController(sess.Interface(), mig.Lookup)
	if err := ctl.Destroy(ctx, gpuUUID, "1g.5gb", pl); err != nil {
		t.Fatal(err)
	}
	if inv := enumerate(t, root); len(inv.GPUs[3].MIGDevices) != 0 {
		t.Errorf("MIG devices after Destroy: %+v", inv.GPUs[3].MIGDevices)
	}
}

// createAgain asks NVML directly for a 1-slice GPU instance at pl on the GPU gpuUUID.
func createAgain(lib nvml.Interface, gpuUUID string, pl mig.Placement) nvml.Return {
	dev, ret := lib.DeviceGetHandleByUUID(gpuUUID)
	if ret != nvml.SUCCESS {
		return ret
	}
	info, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != nvml.SUCCESS {
		return ret
	}
	_, ret = dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)})
	return ret
}

func migDevices(inv *gpu.Inventory) int {
	n := 0
	for _, g := range inv.GPUs {
		n += len(g.MIGDevices)
	}
	return n
}

// checkEventsAndComputeMode asks both sources what the plugin's health monitor and sharing ask:
// the supported event types, registering for XIDs, an event wait that times out, and a compute
// mode set on one GPU, which the stand-in keeps in its state file.
func checkEventsAndComputeMode(t *testing.T, root string) {
	m, err := gputest.New("l4x8")
	if err != nil {
		t.Fatal(err)
	}
	install(t, root, m)
	sess, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	type answers struct {
		Supported        uint64
		Register, Wait   nvml.Return
		SetMode, GetMode nvml.Return
		Mode             nvml.ComputeMode
		Free             nvml.Return
	}
	ask := func(lib nvml.Interface) answers {
		var a answers
		dev, ret := lib.DeviceGetHandleByIndex(2)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex: %v", ret)
		}
		set, ret := lib.EventSetCreate()
		if ret != nvml.SUCCESS {
			t.Fatalf("EventSetCreate: %v", ret)
		}
		a.Supported, _ = dev.GetSupportedEventTypes()
		a.Register = dev.RegisterEvents(nvml.EventTypeXidCriticalError, set)
		_, a.Wait = set.Wait(10)
		a.Free = set.Free()
		a.SetMode = dev.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
		a.Mode, a.GetMode = dev.GetComputeMode()
		return a
	}
	if diff := cmp.Diff(ask(m), ask(sess.Interface())); diff != "" {
		t.Errorf("event and compute-mode answers (-gputest +stand-in):\n%s", diff)
	}
	st, err := ReadState(filepath.Join(root, "usr", "lib64"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GPUs[2].ComputeMode; got != int(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS) {
		t.Errorf("compute mode in the state file: %d, want %d", got, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
	}
}

// TestStandInExportsWhatGoNVMLCalls reads, from go-nvml's own Go sources, every C function its
// cgo code calls, and checks the built library exports each: a missing one would kill the
// plugin with a symbol lookup error the first time it is called.
func TestStandInExportsWhatGoNVMLCalls(t *testing.T) {
	root := buildRoot(t)
	hdr, err := HeaderDir(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	lib, err := elf.Open(filepath.Join(root, "usr", "lib64", LibraryName))
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	syms, err := lib.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			exported[s.Name] = true
		}
	}
	sources, err := filepath.Glob(filepath.Join(hdr, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`\bC\.(nvml\w+)\(`)
	called := map[string]bool{}
	for _, f := range sources {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllSubmatch(data, -1) {
			called[string(m[1])] = true
		}
	}
	if len(called) < 300 {
		t.Fatalf("found only %d C functions called in %s: the pattern no longer matches go-nvml's code", len(called), hdr)
	}
	for name := range called {
		if !exported[name] {
			t.Errorf("go-nvml calls %s; the stand-in does not export it", name)
		}
	}
}
