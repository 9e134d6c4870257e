package driverroot_test

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/internal/driverroot"
)

// layout creates files (content = their path) and symbolic links (target as given) in root.
func layout(t *testing.T, root string, files []string, links map[string]string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range links {
		p := filepath.Join(root, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	// outside is a file of this process that an absolute link must not reach.
	outside := filepath.Join(t.TempDir(), "outside")
	layout(t, root, []string{
		"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05",
		"usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
		"usr/lib64/libc.so.6",
		outside[len(filepath.Dir(outside)):], // "/outside" inside the root too
	}, map[string]string{
		// A merged /usr: lib and lib64 are relative links into usr.
		"lib":   "usr/lib",
		"lib64": "usr/lib64",
		// Absolute targets, as the driver's installer writes them.
		"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1":   "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580",
		"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580": "libnvidia-ml.so.580.95.05",
		"usr/lib64/ld-linux-x86-64.so.2":               "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
		// ".." beyond the root stays at the root.
		"usr/lib64/escape": "../../../../../../../outside",
		"abs-outside":      outside,
		"loop-a":           "loop-b",
		"loop-b":           "/loop-a",
		"dangling":         "/usr/lib64/missing.so",
	})
	for _, tc := range []struct {
		name, path, want string
		wantErr          error
	}{
		{name: "plain file", path: "/usr/lib64/libc.so.6", want: "usr/lib64/libc.so.6"},
		{name: "relative path", path: "usr/lib64/libc.so.6", want: "usr/lib64/libc.so.6"},
		{name: "directory link", path: "lib64/libc.so.6", want: "usr/lib64/libc.so.6"},
		{name: "chain with absolute link", path: "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", want: "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05"},
		{name: "absolute link through directory links", path: "lib64/ld-linux-x86-64.so.2", want: "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{name: "dot-dot stops at the root", path: "usr/lib64/escape", want: "outside"},
		{name: "dot-dot in the argument stops at the root", path: "../../usr/lib64/libc.so.6", want: "usr/lib64/libc.so.6"},
		{name: "absolute link to this process's file stays in the root", path: "abs-outside", wantErr: fs.ErrNotExist},
		{name: "the root itself", path: "/", want: ""},
		{name: "missing", path: "usr/lib64/libnvidia-ml.so.1", wantErr: fs.ErrNotExist},
		{name: "dangling link", path: "dangling", wantErr: fs.ErrNotExist},
		{name: "loop", path: "loop-a", wantErr: syscall.ELOOP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := driverroot.Resolve(root, tc.path)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), root) {
					t.Fatalf("Resolve(%q) = %q, %v; want an error naming the root and wrapping %v", tc.path, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tc.path, err)
			}
			if diff := cmp.Diff(filepath.Join(root, tc.want), got); diff != "" {
				t.Errorf("Resolve(%q) (-want +got):\n%s", tc.path, diff)
			}
		})
	}
}

func TestFindLoader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		links map[string]string
		want  string // "" for not found
	}{
		{name: "Red Hat", files: []string{"usr/lib64/ld-linux-x86-64.so.2"}, links: map[string]string{"lib64": "usr/lib64"},
			want: "usr/lib64/ld-linux-x86-64.so.2"},
		{name: "Debian merged /usr, absolute link", files: []string{"usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
			links: map[string]string{"lib": "usr/lib", "lib64/ld-linux-x86-64.so.2": "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
			want:  "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{name: "Ubuntu arm64", files: []string{"usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"},
			links: map[string]string{"lib": "usr/lib", "usr/lib/ld-linux-aarch64.so.1": "aarch64-linux-gnu/ld-linux-aarch64.so.1"},
			want:  "usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"},
		{name: "dangling link only", links: map[string]string{"lib64/ld-linux-x86-64.so.2": "/lib/x86_64-linux-gnu/ld-2.17.so"}},
		{name: "directory, not a file", files: []string{"lib64/ld-linux-x86-64.so.2/x"}},
		{name: "nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			layout(t, root, tc.files, tc.links)
			got, err := driverroot.FindLoader(root)
			if tc.want == "" {
				if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(root, "lib64/ld-linux-x86-64.so.2")) ||
					!strings.Contains(err.Error(), filepath.Join(root, "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1")) {
					t.Fatalf("FindLoader = %q, %v; want fs.ErrNotExist naming every candidate", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(filepath.Join(root, tc.want), got); diff != "" {
				t.Errorf("FindLoader (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExistingLibraryDirs(t *testing.T) {
	root := t.TempDir()
	layout(t, root, []string{"usr/lib64/a", "usr/lib/x86_64-linux-gnu/b", "usr/lib/c"}, map[string]string{
		"lib64": "/usr/lib64", // same directory as usr/lib64: listed once
		"lib":   "usr/lib",
	})
	want := []string{filepath.Join(root, "usr/lib64"), filepath.Join(root, "usr/lib/x86_64-linux-gnu"), filepath.Join(root, "usr/lib")}
	if diff := cmp.Diff(want, driverroot.ExistingLibraryDirs(root)); diff != "" {
		t.Errorf("ExistingLibraryDirs (-want +got):\n%s", diff)
	}
}

func TestIsHostRoot(t *testing.T) {
	got := map[string]bool{}
	for _, r := range []string{"", "/", "//", "/.", "/driver-root", "/run/nvidia/driver/"} {
		got[r] = driverroot.IsHostRoot(r)
	}
	want := map[string]bool{"": true, "/": true, "//": true, "/.": true, "/driver-root": false, "/run/nvidia/driver/": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("IsHostRoot (-want +got):\n%s", diff)
	}
}

// TestLoadersLieInLibraryDirs: a root whose loader is found always has a library directory
// (the loader's own), so the --library-path of a driver-root tool is never empty.
func TestLoadersLieInLibraryDirs(t *testing.T) {
	var missing []string
	for _, l := range driverroot.Loaders() {
		if !slices.Contains(driverroot.LibraryDirs(), path.Dir(l)) {
			missing = append(missing, l)
		}
	}
	if diff := cmp.Diff([]string(nil), missing); diff != "" {
		t.Errorf("loaders outside the library directories (-want +got):\n%s", diff)
	}
}
