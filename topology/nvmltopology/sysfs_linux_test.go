package nvmltopology_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/nvmltopology"
)

// fakeSysfs writes /sys/bus/pci/devices/<bdf> links the way the kernel lays them out: relative
// links into /sys/devices/pciDDDD:BB/<bridges>/<bdf>.
func fakeSysfs(t *testing.T, devices map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "bus", "pci", "devices")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for bdf, path := range devices {
		if err := os.MkdirAll(filepath.Join(root, "devices", path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "..", "devices", path), filepath.Join(dir, bdf)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestSysfsRoots(t *testing.T) {
	type root struct {
		Root string
		Src  topology.RootSource
	}
	s, d := topology.RootSysfs, topology.RootDerived
	tests := []struct {
		name    string
		machine string
		sysfs   map[string]string // bdf → path under /sys/devices
		want    []root
	}{
		{
			// Sysfs knows GPUs 0 and 3 of the DGX A100; their switch partners 1 and 2 share
			// their host bridge and take their root; GPUs 4-7 are unknown to sysfs and named
			// after their pair.
			name: "partial", machine: "dgx-a100-40gb",
			sysfs: map[string]string{
				"0000:07:00.0": "pci0000:00/0000:00:01.1/0000:05:00.0/0000:06:00.0/0000:07:00.0",
				"0000:4e:00.0": "pci0000:40/0000:40:01.1/0000:4b:00.0/0000:4c:10.0/0000:4e:00.0",
			},
			want: []root{{"pci0000:00", s}, {"pci0000:00", d}, {"pci0000:40", d}, {"pci0000:40", s},
				{"pci0000:87", d}, {"pci0000:87", d}, {"pci0000:b7", d}, {"pci0000:b7", d}},
		},
		{
			name: "all known", machine: "a30x4",
			sysfs: map[string]string{
				"0000:17:00.0": "pci0000:16/0000:16:02.0/0000:17:00.0",
				"0000:65:00.0": "pci0000:64/0000:64:02.0/0000:65:00.0",
				"0000:ca:00.0": "pci0000:c9/0000:c9:02.0/0000:ca:00.0",
				"0000:e3:00.0": "pci0000:e2/0000:e2:02.0/0000:e3:00.0",
			},
			want: []root{{"pci0000:16", s}, {"pci0000:64", s}, {"pci0000:c9", s}, {"pci0000:e2", s}},
		},
		{
			name: "empty sysfs", machine: "a30x4", sysfs: map[string]string{},
			want: []root{{"pci0000:17", d}, {"pci0000:65", d}, {"pci0000:ca", d}, {"pci0000:e3", d}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := gputest.New(tc.machine)
			if err != nil {
				t.Fatal(err)
			}
			topo, err := nvmltopology.Discover(m, nvmltopology.WithSysfsRoot(fakeSysfs(t, tc.sysfs)))
			if err != nil {
				t.Fatal(err)
			}
			var got []root
			for _, g := range topo.GPUs {
				got = append(got, root{g.PCIeRoot, g.PCIeRootSource})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("roots (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSysfsRootMissing(t *testing.T) {
	m, err := gputest.New("a10gx4")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := nvmltopology.Discover(m, nvmltopology.WithSysfsRoot(filepath.Join(t.TempDir(), "absent")))
	if err != nil {
		t.Fatal(err)
	}
	if g := topo.GPUs[3]; g.PCIeRoot != "pci0000:00" || g.PCIeRootSource != topology.RootDerived {
		t.Errorf("GPU 3 root %q from %q", g.PCIeRoot, g.PCIeRootSource)
	}
}
