package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is what a process has used so far, as Linux's /proc reports it.
type Usage struct {
	// CPU is its user plus system CPU time.
	CPU time.Duration
	// RSS is its resident memory now, PeakRSS the most it has had (VmHWM), in bytes.
	RSS, PeakRSS int64
	// RSSAnon and RSSFile split RSS: memory the process allocated, and pages of files it
	// mapped (its executable's, mostly), in bytes.
	RSSAnon, RSSFile int64
}

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// Usage reads the process's CPU time and memory from /proc/<pid>/stat and /proc/<pid>/status.
// Benchmarks use it for the cost of a component per operation, which a shared machine's load
// changes much less than wall-clock time.
func (p *Process) Usage() (Usage, error) {
	var u Usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return u, fmt.Errorf("usage of %s: %w", p.Name, err)
	}
	// The command name (field 2) may hold spaces; the fields after it start at 3, state.
	// utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(f) < 13 {
		return u, fmt.Errorf("usage of %s: /proc/%d/stat has %d fields after the command", p.Name, p.Pid(), len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return u, fmt.Errorf("usage of %s: /proc/%d/stat: %w", p.Name, p.Pid(), err)
		}
		ticks += n
	}
	u.CPU = time.Duration(ticks) * clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return u, fmt.Errorf("usage of %s: %w", p.Name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), ":")
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch {
		case err != nil:
		case name == "VmRSS":
			u.RSS = kb << 10
		case name == "VmHWM":
			u.PeakRSS = kb << 10
		case name == "RssAnon":
			u.RSSAnon = kb << 10
		case name == "RssFile":
			u.RSSFile = kb << 10
		}
	}
	return u, nil
}
