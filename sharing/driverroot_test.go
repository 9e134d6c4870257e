package sharing_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/sharingtest"
)

// toolSource is a driver-root tool that needs no C library. It writes where it runs
// (/proc/self/exe), its arguments, its environment and a string from a library only the driver
// root has, one "key=value" line each, to the file GPUDRA_TOOL_OUT names (stdout without it).
// An argument equal to GPUDRA_TOOL_FAIL makes it print "bad value" to stderr and exit 3.
const toolSource = `
const char *gpudra_tool_lib(void);

static long sys4(long n, long a, long b, long c, long d) {
#if defined(__x86_64__)
	long ret;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b, x2 __asm__("x2") = c, x3 __asm__("x3") = d;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
	return x0;
#else
#error unsupported architecture
#endif
}

#if defined(__x86_64__)
enum { SYS_WRITE = 1, SYS_EXIT = 60, SYS_OPENAT = 257, SYS_READLINKAT = 267 };
__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall tool_main\n\thlt\n");
#else
enum { SYS_WRITE = 64, SYS_EXIT = 93, SYS_OPENAT = 56, SYS_READLINKAT = 78 };
__asm__(".globl _start\n_start:\n\tmov x0, sp\n\tbl tool_main\n");
#endif
enum { AT_FDCWD = -100, O_FLAGS = 01 | 0100 | 02000 /* O_WRONLY|O_CREAT|O_APPEND */ };

static long length(const char *s) { long n = 0; while (s[n]) n++; return n; }

static const char *value(const char *kv, const char *key) {
	while (*key) if (*kv++ != *key++) return 0;
	return *kv == '=' ? kv + 1 : 0;
}

static int equal(const char *a, const char *b) {
	while (*a && *a == *b) a++, b++;
	return *a == *b;
}

static void line(long fd, const char *key, const char *v, long n) {
	sys4(SYS_WRITE, fd, (long)key, length(key), 0);
	sys4(SYS_WRITE, fd, (long)v, n < 0 ? length(v) : n, 0);
	sys4(SYS_WRITE, fd, (long)"\n", 1, 0);
}

__attribute__((used)) void tool_main(long *sp) {
	long argc = sp[0];
	char **argv = (char **)(sp + 1), **envp = argv + argc + 1;
	const char *out = 0, *fail = 0;
	for (char **e = envp; *e; e++) {
		if (value(*e, "GPUDRA_TOOL_OUT")) out = value(*e, "GPUDRA_TOOL_OUT");
		if (value(*e, "GPUDRA_TOOL_FAIL")) fail = value(*e, "GPUDRA_TOOL_FAIL");
	}
	long fd = out ? sys4(SYS_OPENAT, AT_FDCWD, (long)out, O_FLAGS, 0644) : 1;
	char exe[4096];
	long n = sys4(SYS_READLINKAT, AT_FDCWD, (long)"/proc/self/exe", (long)exe, sizeof exe);
	line(fd, "exe=", n > 0 ? exe : "?", n > 0 ? n : -1);
	for (long i = 1; i < argc; i++) line(fd, "arg=", argv[i], -1);
	for (char **e = envp; *e; e++) line(fd, "env=", *e, -1);
	line(fd, "lib=", gpudra_tool_lib(), -1);
	for (long i = 1; fail && i < argc; i++) {
		if (equal(argv[i], fail)) {
			line(2, "bad value ", argv[i], -1);
			sys4(SYS_EXIT, 3, 0, 0, 0);
		}
	}
	sys4(SYS_EXIT, 0, 0, 0, 0);
}
`

// toolLibSource is a library that only the driver root has: the tool starts only when its
// loader searches the root's library directories.
const toolLibSource = `const char *gpudra_tool_lib(void) { return "from the driver root"; }`

// otherLibcSource is the driver root's libc.so.6 as a process of another glibc sees it: a
// library of that name without the symbols and versions its loader expects. A process of this
// host that loads it (LD_LIBRARY_PATH pointing into the root) exits 127 before main, as the
// plugin did with a host glibc that differed from its image's (issue 27).
const otherLibcSource = `int gpudra_not_this_glibc;`

// toolRoot is a driver root in a temporary directory, laid out like a merged-/usr Debian or
// Ubuntu install: a copy of this host's dynamic loader (reached through the absolute link
// lib64/ld-linux-x86-64.so.2 -> /lib/x86_64-linux-gnu/..., resolved inside the root), a
// libc.so.6 this host's processes cannot use, a library only the root has, and the tool as
// nvidia-smi and, through an absolute link, nvidia-cuda-mps-control.
type toolRoot struct {
	dir    string
	loader string // the loader's real path in dir
	libDir string
}

// buildToolRoot compiles the tool with cc (the test is skipped without cc, on a host without a
// glibc loader, or on another architecture than x86_64 and arm64).
func buildToolRoot(t *testing.T, withLoader bool) toolRoot {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build a driver-root tool")
	}
	var triplet, loaderName, loaderLink string
	switch runtime.GOARCH {
	case "amd64":
		triplet, loaderName, loaderLink = "x86_64-linux-gnu", "ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2"
	case "arm64":
		triplet, loaderName, loaderLink = "aarch64-linux-gnu", "ld-linux-aarch64.so.1", "lib/ld-linux-aarch64.so.1"
	default:
		t.Skipf("no driver-root tool for %s", runtime.GOARCH)
	}
	hostLoader, err := filepath.EvalSymlinks("/" + loaderLink)
	if err != nil {
		t.Skipf("no glibc dynamic loader on this host: %v", err)
	}
	src := t.TempDir()
	r := toolRoot{dir: t.TempDir()}
	r.libDir = filepath.Join(r.dir, "usr/lib", triplet)
	for _, d := range []string{r.libDir, filepath.Join(r.dir, "usr/bin"), filepath.Join(r.dir, "lib64")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/lib", filepath.Join(r.dir, "lib")); err != nil {
		t.Fatal(err)
	}
	if withLoader {
		r.loader = filepath.Join(r.libDir, loaderName)
		copyFile(t, hostLoader, r.loader, 0o755)
		if err := os.Symlink("/lib/"+triplet+"/"+loaderName, filepath.Join(r.dir, loaderLink)); err != nil {
			t.Fatal(err)
		}
	}
	compile := func(name, source string, args ...string) {
		t.Helper()
		c := filepath.Join(src, name+".c")
		if err := os.WriteFile(c, []byte(source), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(cc, append([]string{"-O1", "-fno-stack-protector", "-nostdlib", c}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cc %s: %v\n%s", name, err, out)
		}
	}
	compile("libc", otherLibcSource, "-shared", "-fPIC", "-Wl,-soname,libc.so.6", "-o", filepath.Join(r.libDir, "libc.so.6"))
	compile("lib", toolLibSource, "-shared", "-fPIC", "-Wl,-soname,libgpudra-tool.so.1", "-o", filepath.Join(r.libDir, "libgpudra-tool.so.1"))
	tool := filepath.Join(r.dir, "usr/bin/nvidia-smi")
	compile("tool", toolSource, "-fPIE", "-pie", "-o", tool, "-L"+r.libDir, "-l:libgpudra-tool.so.1")
	// An absolute link, which only a lookup inside the root follows to the tool.
	if err := os.Symlink("/usr/bin/nvidia-smi", filepath.Join(r.dir, "usr/bin/nvidia-cuda-mps-control")); err != nil {
		t.Fatal(err)
	}
	return r
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// toolRun is what the tool reported about one run.
type toolRun struct {
	Exe  string
	Args []string
	Lib  string
	// Env is the tool's environment, LDEnv the part of it that steers a dynamic loader.
	Env   []string
	LDEnv []string
}

// readToolRuns parses the tool's report file: one toolRun per "exe=" line.
func readToolRuns(t *testing.T, path string) []toolRun {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the tool did not run: %v", err)
	}
	var runs []toolRun
	for l := range strings.Lines(string(b)) {
		key, v, _ := strings.Cut(strings.TrimSuffix(l, "\n"), "=")
		if key == "exe" {
			runs = append(runs, toolRun{Exe: v})
			continue
		}
		if len(runs) == 0 {
			t.Fatalf("tool report starts with %q", l)
		}
		r := &runs[len(runs)-1]
		switch key {
		case "arg":
			r.Args = append(r.Args, v)
		case "lib":
			r.Lib = v
		case "env":
			r.Env = append(r.Env, v)
			if strings.HasPrefix(v, "LD_") {
				r.LDEnv = append(r.LDEnv, v)
			}
		}
	}
	return runs
}

// hostBinary runs env, a binary of this host, with the given environment (nothing else
// inherited) and returns its error and output.
func hostBinary(t *testing.T, env []string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env binary on this host")
	}
	cmd := exec.Command(bin, "true")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDriverRootToolsRunWithTheRootsOwnLoader (issue 27): the driver root's tools run with the
// root's own dynamic loader and library directories, and no LD_LIBRARY_PATH into the root
// reaches this process, the tools, or the host binaries they start. The driver root holds a
// libc.so.6 this host's processes cannot load, as a host whose glibc differs from the plugin
// image's does: the old way, LD_LIBRARY_PATH pointing at the root's libraries, makes every host
// process exit 127 there, which the test checks first so that the fixture proves something.
func TestDriverRootToolsRunWithTheRootsOwnLoader(t *testing.T) {
	r := buildToolRoot(t, true)
	// The plugin's own environment may hold LD_LIBRARY_PATH for its own libraries: the root's
	// tools must not get it either (this host's libraries with the root's loader).
	t.Setenv("LD_LIBRARY_PATH", "/gpudra-plugin-libs")
	t.Setenv("GPUDRA_PLUGIN_ENV", "kept")
	oldWay := "LD_LIBRARY_PATH=" + strings.Join([]string{filepath.Join(r.dir, "usr/lib64"), r.libDir, filepath.Join(r.dir, "usr/lib"), filepath.Join(r.dir, "lib")}, ":")
	if out, err := hostBinary(t, []string{oldWay}); err == nil || !strings.Contains(out, "GLIBC") {
		t.Fatalf("a host binary with %s = %v, %q; want it to fail to start on the root's libc.so.6 (the fixture reproduces nothing)", oldWay, err, out)
	}
	ctx := context.Background()

	t.Run("nvidia-smi", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "runs")
		smi := sharing.NewNvidiaSMI(sharing.WithSMIDriverRoot(sharing.DriverRootDir(r.dir)), sharing.WithSMIEnv("GPUDRA_TOOL_OUT="+out, "GPUDRA_TOOL_FAIL=9"))
		if err := smi.SetTimeSlice(ctx, "GPU-a", 2); err != nil {
			t.Fatalf("SetTimeSlice: %v", err)
		}
		err := smi.SetTimeSlice(ctx, "GPU-a", 9)
		for _, want := range []string{"bad value 9", "--set-timeslice 9", "run by " + r.loader, "exit status 3"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("failing nvidia-smi: error %v does not say %q", err, want)
			}
		}
		runs := readToolRuns(t, out)
		want := []toolRun{
			{Exe: r.loader, Args: []string{"compute-policy", "-i", "GPU-a", "--set-timeslice", "2"}, Lib: "from the driver root"},
			{Exe: r.loader, Args: []string{"compute-policy", "-i", "GPU-a", "--set-timeslice", "9"}, Lib: "from the driver root"},
		}
		checkRuns(t, want, runs, "GPUDRA_PLUGIN_ENV=kept")
	})

	t.Run("nvidia-cuda-mps-control", func(t *testing.T) {
		dir := shortTempDir(t)
		out := filepath.Join(dir, "runs")
		ctl := sharing.NewMPSControl(sharing.WithMPSDriverRoot(sharing.DriverRootDir(r.dir)), sharing.WithMPSEnv("GPUDRA_TOOL_OUT="+out),
			sharing.WithMPSReadyTimeout(100*time.Millisecond), sharing.WithMPSMounter(sharingtest.NewFakeHost()))
		spec := specIn(dir, "c1", "GPU-a")
		// The tool daemonizes nothing: Start gets as far as the readiness wait.
		if err := ctl.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "did not accept connections") {
			t.Fatalf("Start = %v, want a readiness timeout after the tool ran", err)
		}
		runs := readToolRuns(t, out)
		checkRuns(t, []toolRun{{Exe: r.loader, Args: []string{"-d"}, Lib: "from the driver root"}}, runs,
			"CUDA_VISIBLE_DEVICES=GPU-a", "CUDA_MPS_PIPE_DIRECTORY="+spec.PipeDir, "CUDA_MPS_LOG_DIRECTORY="+spec.LogDir)
	})

	if got := os.Getenv("LD_LIBRARY_PATH"); got != "/gpudra-plugin-libs" {
		t.Errorf("this process's LD_LIBRARY_PATH = %q, want it untouched", got)
	}
}

// checkRuns compares the tool's runs with want (Env and LDEnv aside), requires each run's
// environment to hold wantEnv and nothing that steers a loader, and starts a host binary with
// each run's environment, as a tool's child process would be started: it must run.
func checkRuns(t *testing.T, want, runs []toolRun, wantEnv ...string) {
	t.Helper()
	var envs [][]string
	for i := range runs {
		for _, kv := range wantEnv {
			if !strings.Contains("\n"+strings.Join(runs[i].Env, "\n")+"\n", "\n"+kv+"\n") {
				t.Errorf("run %d: environment lacks %s", i, kv)
			}
		}
		envs = append(envs, runs[i].Env)
		runs[i].Env = nil
	}
	for i := range want {
		want[i].LDEnv = nil // no LD_LIBRARY_PATH, no LD_PRELOAD
	}
	if diff := cmp.Diff(want, runs); diff != "" {
		t.Errorf("driver-root tool runs (-want +got):\n%s", diff)
	}
	for i, env := range envs {
		if out, err := hostBinary(t, env); err != nil {
			t.Errorf("run %d: a host binary started with the tool's environment fails: %v: %s", i, err, out)
		}
	}
}

// TestDriverRootWithoutLoader: a driver root other than "/" whose dynamic loader is missing is
// an error naming the root, the tool and where the loader was looked for; nothing runs.
func TestDriverRootWithoutLoader(t *testing.T) {
	r := buildToolRoot(t, false)
	out := filepath.Join(t.TempDir(), "runs")
	smi := sharing.NewNvidiaSMI(sharing.WithSMIDriverRoot(sharing.DriverRootDir(r.dir)), sharing.WithSMIEnv("GPUDRA_TOOL_OUT="+out))
	err := smi.SetTimeSlice(context.Background(), "GPU-a", 2)
	for _, want := range []string{"driver root " + r.dir, filepath.Join(r.dir, "usr/bin/nvidia-smi"), filepath.Join(r.dir, "lib64/ld-linux-x86-64.so.2"),
		filepath.Join(r.dir, "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1")} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SetTimeSlice without a loader: error %v does not name %s", err, want)
		}
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("SetTimeSlice without a loader = %v, want os.ErrNotExist", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tool ran without the root's loader: %v", err)
	}
}
