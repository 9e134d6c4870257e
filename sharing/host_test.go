package sharing

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"
)

// The test binary doubles as a fake nvidia-cuda-mps-control (GPUDRA_FAKE_MPS=1) so that
// MPSControl is tested against a process with the same interface: "-d" daemonizes and serves
// <pipe>/control; without arguments it forwards stdin to the daemon; "quit" stops it.
func TestMain(m *testing.M) {
	switch os.Getenv("GPUDRA_FAKE_MPS") {
	case "1":
		os.Exit(fakeMPSControl())
	case "server":
		os.Exit(fakeMPSServer())
	}
	os.Exit(m.Run())
}

func fakeMPSControl() int {
	pipe := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if len(os.Args) > 1 && os.Args[1] == "-d" {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "GPUDRA_FAKE_MPS=server")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	c, err := net.Dial("unix", filepath.Join(pipe, "control"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot connect to the control daemon:", err)
		return 1
	}
	defer func() { _ = c.Close() }()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Fprintln(c, sc.Text())
	}
	return 0
}

func fakeMPSServer() int {
	pipe, logDir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	l, err := net.Listen("unix", filepath.Join(pipe, "control"))
	if err != nil {
		return 1
	}
	log, err := os.OpenFile(filepath.Join(logDir, "control.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 1
	}
	fmt.Fprintf(log, "start CUDA_VISIBLE_DEVICES=%s\n", os.Getenv("CUDA_VISIBLE_DEVICES"))
	for {
		c, err := l.Accept()
		if err != nil {
			return 1
		}
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if sc.Text() == "quit" {
				_ = l.Close()
				_ = log.Close()
				return 0
			}
		}
		_ = c.Close()
	}
}

// TestNvidiaSMI runs a fake nvidia-smi from the host root "/" (the binary given by path): its
// arguments, its failure and its environment, which gets nothing from the driver root. Driver
// roots other than "/" are covered by TestDriverRootToolsRunWithTheRootsOwnLoader.
func TestNvidiaSMI(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "args")
	script := "#!/bin/sh\necho \"$@\" >> " + out + "\necho \"LD=$LD_LIBRARY_PATH\" >> " + out + "\n[ \"$5\" = 9 ] && { echo bad value >&2; exit 3; }\nexit 0\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, want := NewNvidiaSMI(WithSMIDriverRoot(DriverRootDir(root))).binary, filepath.Join(bin, "nvidia-smi"); got != want {
		t.Errorf("nvidia-smi found in the driver root at %s, want %s", got, want)
	}
	smi := NewNvidiaSMI(WithSMIDriverRoot("/"), WithSMIBinary(filepath.Join(bin, "nvidia-smi")))
	ctx := context.Background()
	if _, known, err := smi.TimeSlice(ctx, "GPU-a"); known || err != nil {
		t.Errorf("TimeSlice = known %v, %v; want unknown", known, err)
	}
	if err := smi.SetTimeSlice(ctx, "GPU-a", 2); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	want := "compute-policy -i GPU-a --set-timeslice 2\nLD=" + os.Getenv("LD_LIBRARY_PATH") + "\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("nvidia-smi call (-want +got):\n%s", diff)
	}
	err := smi.SetTimeSlice(ctx, "GPU-a", 9)
	if err == nil || !strings.Contains(err.Error(), "bad value") || !strings.Contains(err.Error(), "--set-timeslice 9") {
		t.Errorf("failing nvidia-smi error = %v, want its output and arguments", err)
	}
	if got := NewNvidiaSMI(WithSMIBinary("/x/nvidia-smi")).binary; got != "/x/nvidia-smi" {
		t.Errorf("WithSMIBinary ignored: %s", got)
	}
}

func TestNVMLComputeMode(t *testing.T) {
	mode := nvml.COMPUTEMODE_DEFAULT
	dev := &mock.Device{
		GetComputeModeFunc: func() (nvml.ComputeMode, nvml.Return) { return mode, nvml.SUCCESS },
		SetComputeModeFunc: func(m nvml.ComputeMode) nvml.Return {
			if m == nvml.COMPUTEMODE_EXCLUSIVE_THREAD {
				return nvml.ERROR_NOT_SUPPORTED
			}
			mode = m
			return nvml.SUCCESS
		},
	}
	lib := &mock.Interface{DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
		if uuid != "MIG-1" {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return dev, nvml.SUCCESS
	}}
	c := NewNVMLComputeMode(lib)
	ctx := context.Background()
	if err := c.SetComputeMode(ctx, "MIG-1", ComputeModeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ComputeMode(ctx, "MIG-1"); err != nil || got != ComputeModeExclusiveProcess {
		t.Errorf("ComputeMode = %v, %v; want EXCLUSIVE_PROCESS", got, err)
	}
	if err := c.SetComputeMode(ctx, "MIG-1", 1); err == nil || !strings.Contains(err.Error(), "SetComputeMode(MIG-1, EXCLUSIVE_THREAD)") {
		t.Errorf("unsupported mode error = %v", err)
	}
	if _, err := c.ComputeMode(ctx, "GPU-x"); err == nil || !strings.Contains(err.Error(), "DeviceGetHandleByUUID(GPU-x)") {
		t.Errorf("unknown device error = %v", err)
	}
}

func TestComputeModeText(t *testing.T) {
	for _, m := range []ComputeMode{ComputeModeDefault, 1, ComputeModeProhibited, ComputeModeExclusiveProcess, 7} {
		b, _ := m.MarshalText()
		var back ComputeMode
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Errorf("%v: round trip %q = %v, %v", int(m), b, back, err)
		}
	}
	var m ComputeMode
	if err := m.UnmarshalText([]byte("SHARED")); err == nil {
		t.Error("UnmarshalText(SHARED) succeeded")
	}
}
