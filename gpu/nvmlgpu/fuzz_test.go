package nvmlgpu_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/gpudra/gpudra/resourcepool"
)

// faultMachines are the machines FuzzEnumerateFaults enumerates: whole GPUs only (L4), MIG
// devices on some GPUs of a product (A30), every GPU partitioned (A100), a newer product with
// mixed layouts (H100).
var faultMachines = []struct {
	name string
	opts []gputest.Option
}{
	{"l4x8", nil},
	{"a30x4", []gputest.Option{gputest.WithMIG(1, "2g.12gb", "1g.6gb", "1g.6gb"), gputest.WithMIG(3, "4g.24gb")}},
	{"dgx-a100-40gb", []gputest.Option{gputest.WithMIGConfig("all-balanced")}},
	{"dgx-h100", []gputest.Option{gputest.WithMIG(0, "3g.40gb", "2g.20gb", "1g.10gb"), gputest.WithMIG(5, "7g.80gb")}},
}

// faultedCall is one NVML call of an enumeration made to fail.
type faultedCall struct {
	call string // qualified, as gputest's call hook names it: "Device.GetUUID"
	n    int    // which call of that name, 1-based
	ret  nvml.Return
}

// faultsFrom decodes a fuzz input into the machine, SkipFailedGPUs, and the calls to fail. The
// first byte picks the machine (low bits) and SkipFailedGPUs (bit 7); every following 3 bytes
// pick a call of the fault-free enumeration (2 bytes, modulo the number of calls) and its
// return code (any byte: NVML's codes, the unknown codes between them, and 255 for
// ERROR_UNKNOWN; 0 is no fault).
func faultsFrom(data []byte, calls [][]string) (machine int, skip bool, faults []faultedCall) {
	if len(data) == 0 {
		return 0, false, nil
	}
	machine, skip = int(data[0]&0x7f)%len(faultMachines), data[0]&0x80 != 0
	seq := calls[machine]
	for rest := data[1:]; len(rest) >= 3 && len(faults) < 16; rest = rest[3:] {
		pos := (int(rest[0])<<8 | int(rest[1])) % len(seq)
		ret := nvml.Return(rest[2])
		switch rest[2] {
		case 0:
			continue
		case 255:
			ret = nvml.ERROR_UNKNOWN
		}
		n := 0
		for _, c := range seq[:pos+1] {
			if c == seq[pos] {
				n++
			}
		}
		faults = append(faults, faultedCall{call: seq[pos], n: n, ret: ret})
	}
	return machine, skip, faults
}

// faultFreeEnumerations enumerates each fault machine once, recording its NVML calls in order.
func faultFreeEnumerations(f *testing.F) (calls [][]string, invs []*gpu.Inventory) {
	for _, fm := range faultMachines {
		var seq []string
		m, err := gputest.New(fm.name, append(slices.Clone(fm.opts), gputest.WithCallHook(func(c string) { seq = append(seq, c) }))...)
		if err != nil {
			f.Fatal(err)
		}
		inv, err := nvmlgpu.Enumerate(context.Background(), m)
		if err != nil {
			f.Fatalf("%s: %v", fm.name, err)
		}
		calls, invs = append(calls, seq), append(invs, inv)
	}
	return calls, invs
}

// FuzzEnumerateFaults enumerates fake machines whose NVML calls fail where the input says, with
// any return code, in both modes of SkipFailedGPUs. Enumeration never panics, and either
//
//   - fails, with a *gpu.DeviceError naming the GPU index and the NVML call (or, for the calls
//     made before any GPU is read, an error naming the call), wrapping the return code; or
//   - returns an inventory of what it could read: every GPU it returns is the GPU the fault-free
//     enumeration read at that index (same UUID, minor, product, compute capability, and MIG
//     devices with the same UUIDs, each naming that GPU as its parent), optional attributes
//     possibly left out; with SkipFailedGPUs, every other GPU is in Inventory.Errors, named as
//     above. The slices the root package builds from it, static and dynamic MIG, are valid.
func FuzzEnumerateFaults(f *testing.F) {
	calls, clean := faultFreeEnumerations(f)
	f.Add([]byte{0})
	f.Add([]byte{0x80})
	for mi, seq := range calls {
		// Seeds: the first and the last call of each method (GPU 0's, the last GPU's) fail
		// with NOT_SUPPORTED, UNKNOWN or GPU_IS_LOST, skipping failed GPUs or not.
		first, last := map[string]int{}, map[string]int{}
		for pos, c := range seq {
			if _, ok := first[c]; !ok {
				first[c] = pos
			}
			last[c] = pos
		}
		var positions []int
		for c := range first {
			positions = append(positions, first[c])
			if last[c] != first[c] {
				positions = append(positions, last[c])
			}
		}
		slices.Sort(positions)
		for _, pos := range positions {
			for _, ret := range []byte{byte(nvml.ERROR_NOT_SUPPORTED), 255, byte(nvml.ERROR_GPU_IS_LOST)} {
				f.Add([]byte{byte(mi), byte(pos >> 8), byte(pos), ret})
				f.Add([]byte{byte(mi) | 0x80, byte(pos >> 8), byte(pos), ret})
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mi, skip, faults := faultsFrom(data, calls)
		fm := faultMachines[mi]
		m, err := gputest.New(fm.name, fm.opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, fc := range faults {
			if err := m.InjectFault(fc.call, fc.n, fc.ret); err != nil {
				t.Fatal(err)
			}
		}
		inv, err := nvmlgpu.Enumerate(context.Background(), m, nvmlgpu.SkipFailedGPUs(skip))
		want := clean[mi]
		if err != nil {
			checkEnumerationError(t, err, faults, len(want.GPUs))
			return
		}
		checkInventory(t, inv, want, faults, skip)
		checkSlices(t, inv)
	})
}

// checkEnumerationError checks an error of Enumerate: a *gpu.DeviceError that names a GPU of
// the machine and a call, or an error of a call made before any GPU, naming it.
func checkEnumerationError(t *testing.T, err error, faults []faultedCall, gpus int) {
	t.Helper()
	var derr *gpu.DeviceError
	if !errors.As(err, &derr) {
		for _, fc := range faults {
			op := strings.TrimPrefix(fc.call, "Interface.")
			if op != fc.call && strings.Contains(err.Error(), op+": ") && errors.Is(err, fc.ret) {
				return
			}
		}
		t.Fatalf("Enumerate with faults %v: error %q is no *gpu.DeviceError, and names no failed call made before any GPU", faults, err)
	}
	checkDeviceError(t, derr, faults, gpus)
}

// checkDeviceError checks that a GPU's error names a GPU of the machine and the call that failed,
// and wraps the call's return code: an injected fault's code, or one enumeration reports itself
// — NOT_SUPPORTED (a MIG device without a handle), NOT_FOUND (no profile of the Id a MIG
// instance reports, when a profile scan failed), UNKNOWN.
func checkDeviceError(t *testing.T, derr *gpu.DeviceError, faults []faultedCall, gpus int) {
	t.Helper()
	switch {
	case derr.Index < 0 || derr.Index >= gpus:
		t.Fatalf("faults %v: %v names GPU %d, not one of the machine's %d", faults, derr, derr.Index, gpus)
	case derr.Op == "" || derr.Return == nvml.SUCCESS:
		t.Fatalf("faults %v: %v names no failed call (op %q, return %v)", faults, derr, derr.Op, derr.Return)
	case !strings.Contains(derr.Error(), fmt.Sprintf("gpu %d", derr.Index)) || !strings.Contains(derr.Error(), derr.Op):
		t.Fatalf("faults %v: message %q does not name GPU %d and call %s", faults, derr.Error(), derr.Index, derr.Op)
	case !errors.Is(derr, derr.Return):
		t.Fatalf("faults %v: %v does not wrap %v", faults, derr, derr.Return)
	case derr.Message != derr.Error():
		t.Fatalf("faults %v: Message %q, want %q", faults, derr.Message, derr.Error())
	}
	if derr.Return == nvml.ERROR_NOT_SUPPORTED || derr.Return == nvml.ERROR_NOT_FOUND || derr.Return == nvml.ERROR_UNKNOWN {
		return
	}
	for _, fc := range faults {
		if fc.ret == derr.Return {
			return
		}
	}
	t.Fatalf("faults %v: %v reports a return code no call gave", faults, derr)
}

// checkInventory compares an inventory read with faults with the fault-free one.
func checkInventory(t *testing.T, inv, want *gpu.Inventory, faults []faultedCall, skip bool) {
	t.Helper()
	if inv.DriverVersion != want.DriverVersion || inv.CUDADriverVersion != want.CUDADriverVersion {
		t.Fatalf("faults %v: versions %s/%s, want %s/%s", faults, inv.DriverVersion, inv.CUDADriverVersion, want.DriverVersion, want.CUDADriverVersion)
	}
	if !skip && (len(inv.Errors) > 0 || len(inv.GPUs) != len(want.GPUs)) {
		t.Fatalf("faults %v: without SkipFailedGPUs, %d of %d GPUs and errors %v", faults, len(inv.GPUs), len(want.GPUs), inv.Errors)
	}
	var indexes []int
	for _, derr := range inv.Errors {
		checkDeviceError(t, derr, faults, len(want.GPUs))
		indexes = append(indexes, derr.Index)
		if derr.UUID != "" && derr.UUID != want.GPUs[derr.Index].UUID {
			t.Fatalf("faults %v: %v names UUID %s, GPU %d is %s", faults, derr, derr.UUID, derr.Index, want.GPUs[derr.Index].UUID)
		}
	}
	for _, g := range inv.GPUs {
		indexes = append(indexes, g.Index)
		if g.Index < 0 || g.Index >= len(want.GPUs) {
			t.Fatalf("faults %v: GPU index %d, the machine has %d", faults, g.Index, len(want.GPUs))
		}
		w := want.GPUs[g.Index]
		type identity struct {
			UUID, Product, CC string
			Minor             int
			MIGDevices        []string
		}
		id := func(g gpu.GPU) identity {
			out := identity{UUID: g.UUID, Product: g.ProductName, CC: g.CudaComputeCapability, Minor: g.Minor}
			for _, d := range g.MIGDevices {
				out.MIGDevices = append(out.MIGDevices, d.UUID)
			}
			return out
		}
		wantID := id(w)
		if !g.MIGCapable { // GetMigMode answered NOT_SUPPORTED: the GPU is served whole
			wantID.MIGDevices = nil
		}
		if emptySlotAnswered(faults) {
			// NOT_FOUND and INVALID_ARGUMENT from GetMigDeviceHandleByIndex are what NVML answers
			// for an index no MIG device uses: the device is left out, never another one named.
			var kept []string
			for _, u := range wantID.MIGDevices {
				if slices.ContainsFunc(g.MIGDevices, func(d gpu.MIGDevice) bool { return d.UUID == u }) {
					kept = append(kept, u)
				}
			}
			wantID.MIGDevices = kept
		}
		if diff := cmp.Diff(wantID, id(g)); diff != "" {
			t.Fatalf("faults %v: GPU %d differs from the fault-free read (-want +got):\n%s", faults, g.Index, diff)
		}
		if g.UUID == "" {
			t.Fatalf("faults %v: GPU %d has no UUID", faults, g.Index)
		}
		for _, d := range g.MIGDevices {
			if d.UUID == "" || d.ParentUUID != g.UUID || d.ParentIndex != g.Index || d.ParentMinor != g.Minor || d.Profile == "" {
				t.Fatalf("faults %v: GPU %d: MIG device %+v does not name its parent or its profile", faults, g.Index, d)
			}
		}
	}
	slices.Sort(indexes)
	for i := range want.GPUs {
		if i >= len(indexes) || indexes[i] != i {
			t.Fatalf("faults %v: GPUs and errors cover indexes %v, want each of 0..%d once", faults, indexes, len(want.GPUs)-1)
		}
	}
	if len(indexes) != len(want.GPUs) {
		t.Fatalf("faults %v: GPUs and errors cover indexes %v, want each of 0..%d once", faults, indexes, len(want.GPUs)-1)
	}
}

// emptySlotAnswered says whether a fault answers GetMigDeviceHandleByIndex as NVML does for an
// index no MIG device uses.
func emptySlotAnswered(faults []faultedCall) bool {
	return slices.ContainsFunc(faults, func(fc faultedCall) bool {
		return strings.HasSuffix(fc.call, ".GetMigDeviceHandleByIndex") && (fc.ret == nvml.ERROR_NOT_FOUND || fc.ret == nvml.ERROR_INVALID_ARGUMENT)
	})
}

// checkSlices builds the node's slices from the inventory, with static and with dynamic MIG,
// and checks their devices as the API server checks names: DNS labels, unique in the pool.
func checkSlices(t *testing.T, inv *gpu.Inventory) {
	t.Helper()
	for _, opts := range [][]gpudra.Option{nil, {gpudra.WithDynamicMIG(nil)}} {
		b := gpudra.NewBuilder(opts...)
		pool, err := b.Build("node-1", inv)
		if err != nil {
			t.Fatalf("build slices (%d options) from %+v: %v", len(opts), inv, err)
		}
		out, err := gpudra.ResourceSlices(b.DriverName(), "node-1", pool)
		if err != nil {
			t.Fatalf("render slices: %v", err)
		}
		var devices []string
		for _, s := range out {
			for _, d := range s.Spec.Devices {
				devices = append(devices, d.Name)
			}
			if err := resourcepool.ValidateDevices(s.Spec.Devices); err != nil {
				t.Fatalf("slice %s: %v", s.Name, err)
			}
		}
		seen := map[string]bool{}
		for _, d := range devices {
			if seen[d] {
				t.Fatalf("device %s published twice in the pool", d)
			}
			seen[d] = true
		}
	}
}
