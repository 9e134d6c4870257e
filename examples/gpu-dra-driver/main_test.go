package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/gpu/gputest"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// renderedSlices decodes the ResourceSlices of a render YAML stream.
func renderedSlices(t *testing.T, stream string) []resourceapi.ResourceSlice {
	t.Helper()
	var out []resourceapi.ResourceSlice
	for _, doc := range strings.Split(stream, "---\n") {
		if strings.TrimSpace(doc) == "" || !strings.Contains(doc, "kind: ResourceSlice") {
			continue
		}
		var s resourceapi.ResourceSlice
		if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
			t.Fatalf("render printed an invalid ResourceSlice: %v\n%s", err, doc)
		}
		out = append(out, s)
	}
	return out
}

// renderedDevices decodes a render YAML stream and returns device type → count.
func renderedDevices(t *testing.T, stream string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, s := range renderedSlices(t, stream) {
		for _, d := range s.Spec.Devices {
			counts[*d.Attributes["type"].StringValue]++
		}
	}
	return counts
}

func TestRender(t *testing.T) {
	cases := []struct {
		args []string
		want map[string]int
	}{
		{[]string{"render"}, map[string]int{"gpu": 8}},
		{[]string{"render", "--machine", "l4x8"}, map[string]int{"gpu": 8}},
		{[]string{"render", "--machine", "l4x8", "--dynamic-mig"}, map[string]int{"gpu": 8}},
		{[]string{"render", "--machine", "dgx-a100-40gb", "--mig-config", "all-balanced"}, map[string]int{"mig": 32}},
		{[]string{"render", "--machine", "a30x4", "--mig-config", "all-1g.6gb"}, map[string]int{"mig": 16}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, "kind: DeviceClass\nmetadata:\n  name: gpu.nvidia.com") {
				t.Errorf("render did not print the gpu.nvidia.com DeviceClass first")
			}
			got := renderedDevices(t, out)
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s devices = %d, want %d (all: %v)", k, got[k], v, got)
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("device types = %v, want %v", got, c.want)
			}
		})
	}
}

func TestMIGValidateExitCodes(t *testing.T) {
	// Seed 003's options A-E on one 80GB A100 are valid; the last two are not.
	cases := []struct {
		profiles string
		code     int
	}{
		{"1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb", 0},
		{"3g.40gb,3g.40gb", 0},
		{"7g.80gb", 0},
		{"3g.40gb,2g.20gb,1g.10gb,1g.10gb", 0},
		{"4g.40gb,3g.40gb", 0},
		{"3g.40gb,3g.40gb,1g.10gb", 1},
		// An A100-40GB profile name: the layout is invalid on this model (DESIGN's contract).
		{"1g.5gb", 1},
	}
	for _, c := range cases {
		code, _, errOut := runCLI(t, "mig", "validate", "--gpu", "A100-SXM4-80GB", "--profiles", c.profiles)
		if code != c.code {
			t.Errorf("validate %s: exit %d, want %d (stderr %q)", c.profiles, code, c.code, errOut)
		}
		if c.code == 1 && !strings.HasPrefix(errOut, "invalid: ") {
			t.Errorf("validate %s: stderr %q does not give the reason", c.profiles, errOut)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"render", "--machine", "dgx-z"}, 2, "dgx-a100-40gb"},
		{[]string{"render", "-o", "xml"}, 2, "allowed values are yaml, json"},
		{[]string{"mig", "profiles"}, 2, "--gpu is required"},
		{[]string{"mig", "validate", "--gpu", "GTX 1080", "--profiles", "1g.5gb"}, 2, "A100-SXM4-40GB"},
		{[]string{"mig", "check-config", "../deploy/mig-parted/config.yaml"}, 1, `"too-many"`},
		{[]string{"render", "--nvml", "real", "--mig-config", "all-balanced"}, 2, "fake machines only"},
		// A flag naming a file that cannot be read is a usage error (issue 29; this was exit 3).
		{[]string{"serve", "--node-name", "n1", "--kubeconfig", "/nonexistent/kubeconfig"}, 2, "kubernetes client configuration"},
		{[]string{"serve", "--kubeconfig", "/nonexistent/kubeconfig"}, 2, "--node-name (or $NODE_NAME) is required"},
		{[]string{"serve", "--node-name", "GPU_node"}, 2, "not a Kubernetes node name"},
		{[]string{"serve", "--node-name", "n1", "--machine", "l4x8"}, 2, "--machine needs --nvml=fake"},
		{[]string{"serve", "--node-name", "n1", "--mig-config", "all-balanced"}, 2, "--mig-config needs --nvml=fake"},
		{[]string{"serve", "--node-name", "n1", "--fake-mps-tmpfs"}, 2, "--fake-mps-tmpfs needs --nvml=fake"},
		{[]string{"serve", "--node-name", "n1", "--nvml", "fake", "--fake-control", "0.0.0.0:9"}, 2, "loopback only"},
		{[]string{"serve", "--node-name", "n1", "--nvml", "fake", "--fake-control", "unix:fc.sock"}, 2, "clean absolute path"},
		{[]string{"serve", "--node-name", "n1", "--nvml", "fake", "--fake-control", "unix:/run/../fc.sock"}, 2, "clean absolute path"},
		{[]string{"serve", "--node-name", "n1", "--nvml", "fake", "--state-dir", "state"}, 2, "--state-dir=\"state\": must be an absolute path"},
		{[]string{"serve", "--node-name", "n1", "--proc-root", "host"}, 2, "--proc-root=\"host\": must be an absolute path"},
		{[]string{"serve", "--node-name", "n1", "--proc-root="}, 2, "--proc-root=\"\": must be an absolute path"},
		{[]string{"demo", "--nvml", "real"}, 2, "fake machine only"},
		{[]string{"render", "--mig-partitions-first"}, 2, "--mig-partitions-first needs --dynamic-mig"},
		{[]string{"check", "x.yaml", "--mig-one-me-placement"}, 2, "--mig-one-me-placement needs --dynamic-mig"},
		{[]string{"render", "--dynamic-mig", "--mig-by-profile"}, 2, "--mig-by-profile orders existing (static) MIG devices; it cannot be combined with --dynamic-mig"},
	}
	for _, c := range cases {
		code, _, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

func TestInventoryTable(t *testing.T) {
	code, out, errOut := runCLI(t, "inventory", "--machine", "dgx-a100-40gb", "--mig-config", "all-balanced")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"8 GPUs", "enabled (4 devices)", "8/0", "3g.20gb",
		// The MIG table names what each ID is: the profile ID is the one in the device name.
		"PROFILE ID  PLACEMENT  GI INSTANCE  CI INSTANCE", "gpu-0-mig-3g20gb-9-4   3g.20gb  9 "} {
		if !strings.Contains(out, want) {
			t.Errorf("inventory output lacks %q:\n%s", want, out)
		}
	}
	// Versions read as in mig profiles and nvidia-smi (8.0, CUDA 13.0), not as the semantic
	// versions the attributes publish (8.0.0).
	_, profiles, _ := runCLI(t, "mig", "profiles", "--gpu", "A100-SXM4-40GB")
	for _, c := range []struct{ out, want string }{{out, "  8.0  "}, {out, "CUDA 13.0,"}, {profiles, "CC 8.0)"}, {profiles, "PROFILE ID"}} {
		if !strings.Contains(c.out, c.want) || strings.Contains(c.out, "8.0.0") {
			t.Errorf("output lacks %q or has 8.0.0:\n%s", c.want, c.out)
		}
	}
}

// TestDemo runs the whole pipeline: slices, the seed workloads allocated by the scheduler's
// allocator, prepared over the plugin's DRA socket, CDI injected, then unprepared.
func TestDemo(t *testing.T) {
	code, out, errOut := runCLI(t, "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	for _, want := range []string{
		"published: 208 devices, 8 counter sets",
		"/dev/nvidia-caps/nvidia-cap",          // a dynamic MIG device got its caps nodes
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", // the MPS workload's config reached the container
		"host: time slice 3",                   // TimeSlicing interval Long
		"prepared 8 claims through the DRA socket, unprepared them: 0 CDI specs and 0 dynamic MIG instances left, 0 failures",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// TestServeNeedsNoDriverWithAFakeMachine: a fake machine brings its own fake driver
// installation, so serve's CDI set-up works on a host without /proc/driver/nvidia.
func TestServeNeedsNoDriverWithAFakeMachine(t *testing.T) {
	state := t.TempDir()
	s, err := parseServeFlags([]string{"--node-name", "n1", "--nvml", "fake", "--machine", "l4x8", "--state-dir", state})
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.node.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	root, err := s.driverRootFor(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := cdi.Discover(root)
	if err != nil {
		t.Fatalf("driver discovery on the fake machine's driver root: %v", err)
	}
	if inst.DriverVersion != cditest.DefaultVersion {
		t.Errorf("discovered driver %q, want the fake installation's %q", inst.DriverVersion, cditest.DefaultVersion)
	}
}

// TestServeProcRoot: the kernel's /proc files (the NVIDIA module's version, device majors, MIG
// capability minors) are read in --proc-root in real mode ("/proc" by default, the process's
// own), and below a fake machine's driver installation with --nvml=fake, whatever --proc-root.
func TestServeProcRoot(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		name string
		args []string
		fake bool
		want string
	}{
		{"real, default", []string{"--nvml=real", "--driver-root", root}, false, "/proc/devices"},
		{"real, --proc-root", []string{"--nvml=real", "--driver-root", root, "--proc-root", "/host/proc/"}, false, "/host/proc/devices"},
		{"real, --proc-root not named proc", []string{"--nvml=real", "--driver-root", root, "--proc-root", "/host-proc"}, false, "/host-proc/devices"},
		{"real, --proc-root in the driver root", []string{"--nvml=real", "--driver-root", root, "--proc-root", filepath.Join(root, "proc")}, false, filepath.Join(root, "proc/devices")},
		{"fake machine's driver root", []string{"--nvml=fake", "--machine", "l4x8", "--driver-root", root}, true, filepath.Join(root, "proc/devices")},
		{"fake machine's driver root, --proc-root", []string{"--nvml=fake", "--machine", "l4x8", "--driver-root", root, "--proc-root", "/host/proc"}, true, filepath.Join(root, "proc/devices")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := parseServeFlags(append([]string{"--node-name", "n1"}, c.args...))
			if err != nil {
				t.Fatal(err)
			}
			n := &node{}
			if c.fake {
				if n.machine, err = gputest.New("l4x8"); err != nil {
					t.Fatal(err)
				}
			}
			dr, err := s.driverRootFor(context.Background(), n)
			if err != nil {
				t.Fatal(err)
			}
			hr, ok := dr.(*cdi.HostRoot)
			if !ok {
				t.Fatalf("driver root %T, want a *cdi.HostRoot", dr)
			}
			if got := hr.Resolve("/proc/devices"); got != c.want {
				t.Errorf("/proc/devices is read from %s, want %s", got, c.want)
			}
		})
	}
}

// TestServeDefaultsToRealNVML: without --nvml, serve drives the real GPUs.
func TestServeDefaultsToRealNVML(t *testing.T) {
	t.Setenv("NODE_NAME", "node-a")
	s, err := parseServeFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.node.nvmlMode != "real" || s.node.nodeName != "node-a" {
		t.Errorf("serve defaults: nvml=%q node=%q; want real and $NODE_NAME", s.node.nvmlMode, s.node.nodeName)
	}
}

// TestMIGProfilesAliases: products that NVIDIA sells under another name resolve to the model
// mig-parted groups them with (its config-default.yaml device filters), and the RTX PRO 6000
// lists the 12-unit placements and the 1g.24gb+me profile nvidia-smi prints.
func TestMIGProfilesAliases(t *testing.T) {
	cases := []struct {
		gpu  string
		want []string
	}{
		{"H800", []string{"H100 80GB HBM3 (Hopper", "1g.10gb ", "7g.80gb "}},
		{"NVIDIA H800 PCIe", []string{"H100 PCIe (Hopper", "3g.40gb "}},
		{"h800 nvl", []string{"H100 NVL (Hopper", "1g.12gb+me "}},
		{"A800-SXM4-80GB", []string{"A100-SXM4-80GB (Ampere", "1g.20gb "}},
		{"NVIDIA A800 40GB Active", []string{"A100-SXM4-40GB (Ampere", "1g.5gb "}},
		{"RTX PRO 6000 Blackwell Server Edition", []string{"12 memory slices", "1g.24gb+me ", "0:3 3:3 6:3 9:3", "0:6 6:6", "0:12"}},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, "mig", "profiles", "--gpu", c.gpu)
		if code != 0 {
			t.Errorf("mig profiles --gpu %q: exit %d, stderr %q", c.gpu, code, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("mig profiles --gpu %q: output lacks %q:\n%s", c.gpu, w, out)
			}
		}
	}
}
