package draplugin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
)

// The memory benchmark runs the plugin in a child process (this test binary, re-executed) that
// serves a fake node as the reference driver's serve does (slices published, health monitor and
// metrics on), and measures its resident set from outside while the parent plays kubelet.

const memEnvDir = "GPUDRA_MEM_CHILD" // the node directory; set in a child

var memProfiles = flag.String("mem.profiles", "", "BenchmarkPluginMemory: copy the child's heap profiles (idle, after) to this directory")

// memChild serves the node of its directory until killed; SIGUSR1 writes a heap profile.
func memChild() int {
	dir := os.Getenv(memEnvDir)
	fail := func(err error) int {
		_ = os.WriteFile(filepath.Join(dir, "error"), []byte(err.Error()), 0o600)
		return 3
	}
	node, err := draplugintest.NewNode("dgx-a100-40gb", draplugintest.WithDir(dir))
	if err != nil {
		return fail(err)
	}
	claims, err := readClaims(dir)
	if err != nil {
		return fail(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx := context.Background()
	p, err := node.NewPlugin(ctx, func(c *draplugin.Config) { c.Metrics = reg })
	if err != nil {
		return fail(err)
	}
	if _, err := node.Serve(ctx, p, draplugin.StartConfig{RegistrarDir: filepath.Join(dir, "r"), PluginDir: filepath.Join(dir, "d")}, claims...); err != nil {
		return fail(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600); err != nil {
		return fail(err)
	}
	for n := 1; ; n++ {
		<-sig
		runtime.GC()
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%d.pprof", n)))
		if err != nil {
			return fail(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			return fail(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b, _ := json.Marshal(map[string]uint64{"HeapInuse": ms.HeapInuse, "HeapAlloc": ms.HeapAlloc, "StackInuse": ms.StackInuse, "Sys": ms.Sys,
			"HeapSys": ms.HeapSys, "HeapReleased": ms.HeapReleased, "GCSys": ms.GCSys, "OtherSys": ms.OtherSys, "MSpanInuse": ms.MSpanInuse})
		_ = f.Close()
		name := filepath.Join(dir, fmt.Sprintf("memstats-%d.json", n))
		if err := os.WriteFile(name+".tmp", b, 0o600); err != nil {
			return fail(err)
		}
		if err := os.Rename(name+".tmp", name); err != nil { // the parent waits for the name
			return fail(err)
		}
	}
}

// rss is a process's resident set in KiB: all of it, its anonymous part (heap, stacks, the
// runtime's own) and the file-backed part (the binary's pages it touched, shared libraries).
type rss struct{ total, anon, file int }

func readRSS(pid int) (rss, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return rss{}, err
	}
	defer f.Close()
	var r rss
	fields := map[string]*int{"VmRSS:": &r.total, "RssAnon:": &r.anon, "RssFile:": &r.file}
	for s := bufio.NewScanner(f); s.Scan(); {
		for prefix, dst := range fields {
			if v, ok := strings.CutPrefix(s.Text(), prefix); ok {
				if *dst, err = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB")); err != nil {
					return r, err
				}
			}
		}
	}
	if r.total == 0 {
		return r, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return r, nil
}

// BenchmarkPluginMemory measures the resident set of a plugin process serving the default fake
// machine (dgx-a100-40gb, 8 full GPUs), idle after start-up and after 1000 prepare/unprepare
// cycles through its sockets (eight exclusive claims in turn): all of it, and its anonymous part
// (what the process allocated, as opposed to the pages of its executable). Reported in MiB; the
// child's heap after a GC is reported too. The child is this test binary, which is larger than a
// driver's, and uses the fake API client of draplugintest. Run with -benchtime 1x;
// -mem.profiles keeps the heap profiles.
func BenchmarkPluginMemory(b *testing.B) {
	for b.Loop() {
		idle, after, heap := pluginMemory(b)
		b.ReportMetric(float64(idle.total)/1024, "rss-idle-MiB")
		b.ReportMetric(float64(after.total)/1024, "rss-after-1000-MiB")
		b.ReportMetric(float64(idle.anon)/1024, "anon-idle-MiB")
		b.ReportMetric(float64(after.anon)/1024, "anon-after-1000-MiB")
		b.ReportMetric(float64(heap)/(1<<20), "heap-inuse-after-MiB")
	}
}

func pluginMemory(b *testing.B) (idle, after rss, heapInuse uint64) {
	dir, err := os.MkdirTemp("", "gdm")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	node, err := draplugintest.NewNode("dgx-a100-40gb", draplugintest.WithDir(dir))
	if err != nil {
		b.Fatal(err)
	}
	var claims []*resourceapi.ResourceClaim
	for i := range 8 {
		c, err := node.Allocate(context.Background(), draplugintest.Claim(fmt.Sprintf("claim-%d", i), gpudra.GPUDeviceClassName, gpuIndex(i), ""))
		if err != nil {
			b.Fatal(err)
		}
		claims = append(claims, c)
	}
	raw, err := json.Marshal(claims)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "claims.json"), raw, 0o600); err != nil {
		b.Fatal(err)
	}
	bin := coldCopy(b, dir)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), memEnvDir+"="+dir)
	if *memProfiles != "" {
		// A finer profile, from the first allocation of package initialization on; the default
		// samples every 512 KiB.
		cmd.Env = append(cmd.Env, "GODEBUG=memprofilerate=4096")
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitFile(b, dir, "ready")
	time.Sleep(2 * time.Second) // let start-up work (publishing, health monitor) settle
	if idle, err = readRSS(cmd.Process.Pid); err != nil {
		b.Fatal(err)
	}
	dump(b, cmd, dir, 1)
	k, err := draplugintest.ConnectKubelet(context.Background(), filepath.Join(dir, "r", gpudra.DefaultDriverName+"-reg.sock"), gpudra.DefaultDriverName)
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	ctx := context.Background()
	for i := range 1000 {
		c := claims[i%len(claims)]
		if resp, err := k.Prepare(ctx, c); err != nil || resp.Claims[string(c.UID)].GetError() != "" {
			b.Fatalf("prepare %d: %v %v", i, err, resp)
		}
		if resp, err := k.Unprepare(ctx, c); err != nil || resp.Claims[string(c.UID)].GetError() != "" {
			b.Fatalf("unprepare %d: %v %v", i, err, resp)
		}
	}
	if after, err = readRSS(cmd.Process.Pid); err != nil {
		b.Fatal(err)
	}
	dump(b, cmd, dir, 2)
	var ms map[string]uint64
	if raw, err := os.ReadFile(filepath.Join(dir, "memstats-2.json")); err == nil {
		_ = json.Unmarshal(raw, &ms)
	}
	b.Logf("RSS KiB idle %+v, after %+v; child memstats after: %v", idle, after, ms)
	return idle, after, ms["HeapInuse"]
}

// coldCopy copies this binary into dir and drops the copy from the page cache. How the kernel
// maps an executable depends on how its pages got into the cache: a binary just written (by the
// linker, or this process) or mapped by a running process (the parent) may be cached in large
// folios and mapped with 2 MiB pages, which makes most of its text resident (70 MB instead of
// 52 MB for serve, idle). Read back from disk, it is mapped page by page, as on a node.
func coldCopy(b *testing.B, dir string) string {
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "plugin.test")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(src); err != nil {
		b.Fatal(err)
	}
	// Only clean pages can be dropped: write the copy back first.
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Logf("dropping %s from the page cache: %v", path, err)
	}
	return path
}

// dump asks the child for heap profile n and copies it to -mem.profiles.
func dump(b *testing.B, cmd *exec.Cmd, dir string, n int) {
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("memstats-%d.json", n)
	waitFile(b, dir, name)
	if *memProfiles == "" {
		return
	}
	for _, f := range []string{fmt.Sprintf("heap-%d.pprof", n), name} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*memProfiles, f), raw, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func waitFile(b *testing.B, dir, name string) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return
		}
		if raw, err := os.ReadFile(filepath.Join(dir, "error")); err == nil {
			b.Fatalf("child failed: %s", raw)
		}
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
