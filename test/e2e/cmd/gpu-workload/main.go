// Command gpu-workload is the node tier's workload container: it prints one report.Report line
// (the NVIDIA environment, device nodes and mounts it sees), then waits for SIGTERM. Built
// statically; tests read the line back from the container's log.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/test/e2e/framework/kubenode/report"
)

func main() {
	r := report.Report{Env: map[string]string{}, Mounts: map[string]string{}, Dirs: map[string][]string{}}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "NVIDIA_") || strings.HasPrefix(k, "CUDA_") || strings.HasPrefix(k, "GPUDRA_") {
			r.Env[k] = v
		}
	}
	r.Devices = devices()
	r.Mounts = mounts()
	for _, d := range []string{os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY"), "/dev/shm"} {
		if d == "" {
			continue
		}
		entries, err := os.ReadDir(d)
		names := []string{}
		if err != nil {
			names = append(names, "error: "+err.Error())
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		r.Dirs[d] = names
	}
	line, err := r.Line()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-workload:", err)
		os.Exit(1)
	}
	fmt.Println(line)
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}

// devices lists /dev/nvidia* and the nodes below /dev/nvidia-caps and
// /dev/nvidia-caps-imex-channels.
func devices() []report.Device {
	var paths []string
	top, _ := filepath.Glob("/dev/nvidia*")
	for _, p := range top {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			sub, _ := filepath.Glob(filepath.Join(p, "*"))
			paths = append(paths, sub...)
			continue
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out []report.Device
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			out = append(out, report.Device{Path: p, Open: err.Error()})
			continue
		}
		d := report.Device{Path: p, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev), Type: "other"}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			d.Type = "c"
		case unix.S_IFBLK:
			d.Type = "b"
		}
		d.Open = "ok"
		if f, err := os.Open(p); err != nil {
			d.Open = err.Error()
		} else {
			_ = f.Close()
		}
		out = append(out, d)
	}
	return out
}

// mounts maps mount points to filesystem types.
func mounts() map[string]string {
	m := map[string]string{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return m
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && len(fields) > 4 {
				m[fields[4]] = fields[i+1]
				break
			}
		}
	}
	return m
}
