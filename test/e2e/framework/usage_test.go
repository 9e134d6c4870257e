//go:build linux

package framework_test

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// TestUsageMatchesTheKernelsAccount: the CPU time Usage reads from /proc for a child that
// worked (a shell loop opening /dev/null: user and system time) and then went to sleep is the
// time the kernel reports for it through getrusage once it is reaped (to the 10 ms tick), and
// its memory is that of a live process.
func TestUsageMatchesTheKernelsAccount(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	// The shell works, then becomes `sleep` (exec keeps the pid): once /proc says "sleep" it
	// uses no more CPU.
	p, err := framework.StartProcess("spin", filepath.Join(t.TempDir(), "log"), nil,
		"sh", "-c", "i=0; while [ $i -lt 30000 ]; do : </dev/null; i=$((i+1)); done; exec sleep 1")
	if err != nil {
		t.Fatal(err)
	}
	var before syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.Pid()), "comm"))
		if err != nil || string(comm) == "sleep\n" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	u, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitExit(t.Context()); err != nil {
		t.Fatal(err)
	}
	var after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after); err != nil {
		t.Fatal(err)
	}
	kernel := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	// After /proc says "sleep", the new image still loads and later exits: CPU the kernel
	// counts after Usage read it (tens of ms on a loaded machine), never before.
	if d := u.CPU - kernel; d < -60*time.Millisecond || d > 20*time.Millisecond || kernel == 0 {
		t.Errorf("Usage CPU = %s, getrusage says the child used %s", u.CPU, kernel)
	}
	if u.RSS <= 0 || u.PeakRSS < u.RSS {
		t.Errorf("Usage RSS = %d, peak %d: want a positive RSS no larger than the peak", u.RSS, u.PeakRSS)
	}
}
