package nvmlgpu_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/cdi/cditest"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
)

const nvmlFile = "libnvidia-ml.so." + cditest.DefaultVersion

// fakeDriverRoot lays out a fake driver installation whose NVML is in libDir, plus the given
// symbolic links (path in the root -> target, written as the driver's installer writes it).
func fakeDriverRoot(t *testing.T, libDir string, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := cditest.Build(dir, cditest.Layout{LibDir: libDir, Libraries: []string{"libnvidia-ml", "libcuda"}}); err != nil {
		t.Fatal(err)
	}
	for link, target := range links {
		p := filepath.Join(dir, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindLibrary(t *testing.T) {
	// hostOnly exists in this process's filesystem but not in any driver root.
	hostOnly := filepath.Join(t.TempDir(), nvmlFile)
	if err := os.WriteFile(hostOnly, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		libDir string
		links  map[string]string
		want   string // path inside the root; "" when not found
	}{
		{name: "Debian, absolute link", libDir: "/usr/lib/x86_64-linux-gnu",
			links: map[string]string{"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": "/usr/lib/x86_64-linux-gnu/" + nvmlFile},
			want:  "usr/lib/x86_64-linux-gnu/" + nvmlFile},
		{name: "relative chain", libDir: "/usr/lib/x86_64-linux-gnu",
			links: map[string]string{
				"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1":   "libnvidia-ml.so.580",
				"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580": "./" + nvmlFile,
			},
			want: "usr/lib/x86_64-linux-gnu/" + nvmlFile},
		{name: "chain through an absolute directory link", libDir: "/usr/lib64",
			links: map[string]string{
				"lib64":                         "/usr/lib64",
				"usr/lib64/libnvidia-ml.so.1":   "/lib64/libnvidia-ml.so.580",
				"usr/lib64/libnvidia-ml.so.580": "../../lib64/" + nvmlFile,
			},
			want: "usr/lib64/" + nvmlFile},
		{name: "aarch64", libDir: "/usr/lib/aarch64-linux-gnu",
			links: map[string]string{"usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1": nvmlFile},
			want:  "usr/lib/aarch64-linux-gnu/" + nvmlFile},
		{name: "usr/lib64 before the multiarch directory", libDir: "/usr/lib/x86_64-linux-gnu",
			links: map[string]string{
				"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": nvmlFile,
				"usr/lib64/libnvidia-ml.so.1":                "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
			},
			want: "usr/lib/x86_64-linux-gnu/" + nvmlFile},
		{name: "absolute link to a file only this process has", libDir: "/usr/lib/x86_64-linux-gnu",
			links: map[string]string{"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": hostOnly}},
		{name: "no libnvidia-ml.so.1", libDir: "/usr/lib/x86_64-linux-gnu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeDriverRoot(t, tc.libDir, tc.links)
			got, err := nvmlgpu.FindLibrary(root)
			if tc.want == "" {
				if !errors.Is(err, nvmlgpu.ErrNVMLNotFound) {
					t.Fatalf("FindLibrary = %q, %v; want ErrNVMLNotFound", got, err)
				}
				for _, d := range nvmlgpu.LibrarySearchDirs() {
					if dir := filepath.Join(root, d); !strings.Contains(err.Error(), dir+",") && !strings.Contains(err.Error(), dir+")") {
						t.Errorf("error does not name searched directory %s: %v", d, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(filepath.Join(root, tc.want), got); diff != "" {
				t.Errorf("FindLibrary (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLibrarySearchDirs(t *testing.T) {
	want := []string{"usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64",
		"lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "usr/lib", "lib"}
	if diff := cmp.Diff(want, nvmlgpu.LibrarySearchDirs()); diff != "" {
		t.Errorf("LibrarySearchDirs (-want +got):\n%s", diff)
	}
}

// TestOpenRealWithDriverRoot: OpenReal loads NVML by the path FindLibrary returns (the fake
// library is no ELF file, so loading it fails and the error names the path it tried); a root
// without NVML fails before anything is loaded; the host root "/" falls back to the loader's
// search by name.
func TestOpenRealWithDriverRoot(t *testing.T) {
	root := fakeDriverRoot(t, "/usr/lib/x86_64-linux-gnu", map[string]string{
		"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": "/usr/lib/x86_64-linux-gnu/" + nvmlFile,
	})
	want := filepath.Join(root, "usr/lib/x86_64-linux-gnu", nvmlFile)
	if _, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(root)); !errors.Is(err, nvmlgpu.ErrNVMLNotFound) || !strings.Contains(err.Error(), "cannot load "+want+" ") {
		t.Errorf("OpenReal(WithDriverRoot(fake root)) = %v; want ErrNVMLNotFound loading %s", err, want)
	}
	explicit := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	if _, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(root), nvmlgpu.WithLibraryPath(explicit)); !errors.Is(err, nvmlgpu.ErrNVMLNotFound) || !strings.Contains(err.Error(), explicit) {
		t.Errorf("OpenReal(WithDriverRoot, WithLibraryPath) = %v; want WithLibraryPath's path", err)
	}
	empty := t.TempDir()
	if _, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(empty)); !errors.Is(err, nvmlgpu.ErrNVMLNotFound) || !strings.Contains(err.Error(), "driver root "+empty) {
		t.Errorf("OpenReal(WithDriverRoot(empty root)) = %v; want ErrNVMLNotFound naming the root", err)
	}
	if _, err := nvmlgpu.FindLibrary("/"); err == nil {
		t.Skip("this host has NVML in /: the fallback to the loader's search is not taken")
	}
	s, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot("/"))
	if err == nil {
		_ = s.Close()
		return // the loader found NVML where FindLibrary does not look
	}
	if !errors.Is(err, nvmlgpu.ErrNVMLNotFound) || !strings.Contains(err.Error(), "cannot load "+nvmlgpu.DefaultLibraryPath+" ") {
		t.Errorf("OpenReal(WithDriverRoot(\"/\")) without NVML = %v; want the loader's search for %s", err, nvmlgpu.DefaultLibraryPath)
	}
}
