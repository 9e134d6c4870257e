package cditest_test

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cdi/cditest"
)

func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		layout     cditest.Layout
		nodes      []string
		missing    []string
		minorLines int
	}{
		{
			name:       "default",
			nodes:      []string{"/dev/nvidia0", "/dev/nvidia7", cdi.NvidiaCtlPath, cdi.NvidiaUVMPath, cdi.NvidiaUVMToolsPath, cdi.NvidiaModesetPath},
			missing:    []string{"/dev/nvidia8", "/dev/nvidia-caps/nvidia-cap3"},
			minorLines: 2 + 8*15*9,
		},
		{
			name:    "minimal",
			layout:  cditest.Layout{GPUs: 1, NoUVM: true, NoModeset: true, NoMIG: true},
			nodes:   []string{"/dev/nvidia0", cdi.NvidiaCtlPath},
			missing: []string{"/dev/nvidia1", cdi.NvidiaUVMPath, cdi.NvidiaModesetPath},
		},
		{
			name:       "caps nodes",
			layout:     cditest.Layout{GPUs: 1, CapsNodes: true},
			nodes:      []string{"/dev/nvidia-caps/nvidia-cap3", "/dev/nvidia-caps/nvidia-cap137"},
			missing:    []string{"/dev/nvidia-caps/nvidia-cap138"},
			minorLines: 2 + 15*9,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRoot(t, tc.layout)
			for _, p := range tc.nodes {
				info, err := r.DeviceNode(p)
				if err != nil || info.Type != "c" || info.Major == 0 {
					t.Errorf("DeviceNode(%s) = %+v, %v", p, info, err)
				}
				if _, err := r.Stat(p); err != nil {
					t.Errorf("node %s has no file: %v", p, err)
				}
			}
			for _, p := range tc.missing {
				if _, err := r.DeviceNode(p); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("DeviceNode(%s) = %v, want fs.ErrNotExist", p, err)
				}
			}
			data, err := r.ReadFile(cdi.MIGMinorsPath)
			if tc.minorLines == 0 {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("mig-minors exists without MIG: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(string(data), "\n"); got != tc.minorLines {
				t.Errorf("mig-minors has %d lines, want %d", got, tc.minorLines)
			}
		})
	}
}

func TestSetAndRemoveDeviceNode(t *testing.T) {
	r := newRoot(t, cditest.Layout{GPUs: 1})
	want := cdi.NodeInfo{Type: "c", Major: 1, Minor: 3, Mode: 0o600}
	if err := r.SetDeviceNode("/dev/null", want); err != nil {
		t.Fatal(err)
	}
	got, err := r.DeviceNode("/dev/../dev/null")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := r.RemoveDeviceNode("/dev/null"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Stat("/dev/null"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file of a removed node still there: %v", err)
	}
	if r.HostPath("/dev/nvidia0") != "/dev/nvidia0" || !strings.HasPrefix(r.Resolve("/dev/nvidia0"), r.Dir()) {
		t.Errorf("HostPath %s, Resolve %s, Dir %s", r.HostPath("/dev/nvidia0"), r.Resolve("/dev/nvidia0"), r.Dir())
	}
}

// newRoot lays out a fake driver root in a temporary directory of t.
func newRoot(t testing.TB, l cditest.Layout) *cditest.DriverRoot {
	t.Helper()
	r, err := cditest.Build(t.TempDir(), l)
	if err != nil {
		t.Fatalf("fake driver root: %v", err)
	}
	return r
}
