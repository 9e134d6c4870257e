package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// memDump, when set, is a directory where BenchmarkDriverMemory leaves each process's
// /proc/<pid>/smaps and the addresses of its resident pages at each reading, for finding out
// which parts of a binary a process touches (see dumpMemory).
var memDump = flag.String("mem.dump", "", "BenchmarkDriverMemory: write each driver's smaps and resident file pages at each reading into this directory")

// memoryCycles is how many prepare/unprepare cycles run between the idle and the "after"
// readings.
const memoryCycles = 1000

// BenchmarkDriverMemory (issue 33) compares the resident memory of `gpu-dra-driver serve` and
// of dra-example-driver's kubelet plugin, side by side in the same run: each serves one node of
// eight GPUs (serve: the fake dgx-a100-40gb with the chart's arguments; the example driver:
// eight of its fake GPUs, serve's API client limits), authenticated to the real API server.
// Both binaries are dropped from the page cache before they start, so that their executables'
// pages come in as on a node that just pulled the image (see "Memory of the kubelet plugin"
// in docs/benchmarks.md for why that matters). Readings: 2 s after registration (idle), then
// after memoryCycles prepare/unprepare cycles of one exclusive claim each, interleaved. Run it
// with -benchtime 1x (make bench-e2e-memory); it reports MiB as custom metrics and prints a
// table.
func BenchmarkDriverMemory(b *testing.B) {
	ctx := context.Background()
	path, err := suite.Bins.ExampleDriverPath(ctx, os.Stdout, false)
	if err != nil {
		b.Fatal(err)
	}
	for _, bin := range []string{suite.DriverBinary, path} {
		if err := dropFromPageCache(bin); err != nil {
			b.Fatal(err)
		}
	}
	node := suite.StartNode(b, NodeSpec{Name: "mem-ours", Machine: "dgx-a100-40gb"})
	ours := &target{bench: "gpudra", driver: oursName, plugin: node.Kubelet, proc: node.Driver.Proc}
	ours.claims, ours.devices = scheduleClaims(ctx, b, node.Spec.Name, []*resourceapi.ResourceClaim{claimSpec("m", "gpu.nvidia.com", "", nil)})
	kubeconfig, err := exampleCredentials(ctx)
	if err != nil {
		b.Fatal(err)
	}
	plugin, proc := startExample(ctx, b, path, kubeconfig, "mem-ex", 200, 400, 8)
	ex := &target{bench: "example", driver: exampleName, plugin: plugin, proc: proc}
	ex.claims, ex.devices = scheduleClaims(ctx, b, "mem-ex", []*resourceapi.ResourceClaim{claimSpec("m", exampleDriverName, "", nil)})
	targets := []*target{ours, ex}

	for b.Loop() {
		time.Sleep(2 * time.Second)
		idle := usages(b, targets)
		dumpMemory(b, targets, "idle")
		for i := range memoryCycles {
			for j := range targets {
				t := targets[(i+j)%len(targets)]
				if err := t.prepare(ctx, t.claims[0]); err != nil {
					b.Fatalf("%s: %v", t.driver, err)
				}
				if err := t.unprepare(ctx, t.claims[0]); err != nil {
					b.Fatalf("%s: %v", t.driver, err)
				}
			}
		}
		after := usages(b, targets)
		dumpMemory(b, targets, "after")
		reportMemory(b, targets, idle, after)
	}
	b.ReportMetric(0, "ns/op")
}

// usages reads every target's process usage.
func usages(b *testing.B, targets []*target) []framework.Usage {
	out := make([]framework.Usage, len(targets))
	for i, t := range targets {
		u, err := t.proc.Usage()
		if err != nil {
			b.Fatal(err)
		}
		out[i] = u
	}
	return out
}

// reportMemory reports the readings as metrics and prints them as a markdown table, with
// each binary's size.
func reportMemory(b *testing.B, targets []*target, idle, after []framework.Usage) {
	var tab strings.Builder
	tab.WriteString("\n| driver | binary | RSS idle (anon / file) | RSS after " + fmt.Sprint(memoryCycles) + " cycles (anon / file) | peak RSS |\n|---|---|---|---|---|\n")
	for i, t := range targets {
		size := int64(0)
		if fi, err := os.Stat(t.proc.Args[0]); err == nil {
			size = fi.Size()
		}
		fmt.Fprintf(&tab, "| %s | %.1f MB | %.1f MiB (%.1f / %.1f) | %.1f MiB (%.1f / %.1f) | %.1f MiB |\n", t.driver, float64(size)/1e6,
			mebi(idle[i].RSS), mebi(idle[i].RSSAnon), mebi(idle[i].RSSFile),
			mebi(after[i].RSS), mebi(after[i].RSSAnon), mebi(after[i].RSSFile), mebi(after[i].PeakRSS))
		b.ReportMetric(mebi(idle[i].RSS), "MiB-idle-"+t.bench)
		b.ReportMetric(mebi(after[i].RSS), "MiB-after-"+t.bench)
	}
	fmt.Print(tab.String())
}

func mebi(n int64) float64 { return float64(n) / (1 << 20) }

// dropFromPageCache asks the kernel to drop the file's cached pages (clean pages only: the
// binaries were written long before), so that a process started from it faults its pages in
// from disk.
func dropFromPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop %s from the page cache: %w", path, err)
	}
	return nil
}

// dumpMemory writes, when -mem.dump is set, each target's /proc/<pid>/smaps to
// DIR/<bench>-<when>.smaps and the resident pages of its executable's mappings to
// DIR/<bench>-<when>.pages: one line per page, its file offset in hex. With the unstripped
// binary's symbol table (go tool nm -size -n) the offsets say which packages' code and data
// the process touched.
func dumpMemory(b *testing.B, targets []*target, when string) {
	if *memDump == "" {
		return
	}
	if err := os.MkdirAll(*memDump, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, t := range targets {
		base := filepath.Join(*memDump, t.bench+"-"+when)
		smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", t.proc.Pid()))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(base+".smaps", smaps, 0o644); err != nil {
			b.Fatal(err)
		}
		pages, err := residentPages(t.proc.Pid(), t.proc.Args[0], smaps)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(base+".pages", []byte(pages), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// residentPages lists the file offsets of the resident pages of exe's mappings in process
// pid, read from /proc/<pid>/pagemap (bit 63: present; needs root for the page frames, not
// for this bit).
func residentPages(pid int, exe string, smaps []byte) (string, error) {
	exe, err := filepath.Abs(exe)
	if err != nil {
		return "", err
	}
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return "", err
	}
	defer func() { _ = pm.Close() }()
	page := int64(os.Getpagesize())
	var out strings.Builder
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseInt(lo, 16, 64)
		end, err2 := strconv.ParseInt(hi, 16, 64)
		off, err3 := strconv.ParseInt(f[2], 16, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return "", fmt.Errorf("smaps line %q: %w", line, err)
		}
		entries := make([]byte, (end-start)/page*8)
		if _, err := pm.ReadAt(entries, start/page*8); err != nil {
			return "", fmt.Errorf("pagemap of %#x-%#x: %w", start, end, err)
		}
		for i := range int64(len(entries) / 8) {
			if binary.LittleEndian.Uint64(entries[i*8:])>>63 == 1 {
				fmt.Fprintf(&out, "%x\n", off+i*page)
			}
		}
	}
	return out.String(), nil
}
