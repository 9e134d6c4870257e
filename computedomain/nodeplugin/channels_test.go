package nodeplugin_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/computedomain/nodeplugin"
)

// procDevices is a /proc/devices with the IMEX channels' major (and a block device of the same
// name, which must not be taken for it).
const procDevices = `Character devices:
  1 mem
195 nvidia
234 nvidia-caps-imex-channels
511 nvidia-caps

Block devices:
  8 sd
235 nvidia-caps-imex-channels
`

// node is what a device node is, as the test compares it.
type node struct {
	Char         bool
	Major, Minor uint32
	Mode         uint32
}

func statNode(t *testing.T, path string) node {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return node{Char: st.Mode&unix.S_IFMT == unix.S_IFCHR, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev), Mode: st.Mode & 0o7777}
}

// TestHostChannels makes real character device nodes in a temporary directory with the major
// of a fake /proc/devices. Limits of the fake: the nodes' major has no driver behind it here
// (opening one fails), the directory is not the host's /dev, and mknod needs root (the test
// skips otherwise); what is checked is the node's type, numbers and mode, and that nodes that
// exist are kept when right and refused when not.
func TestHostChannels(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of character devices needs root")
	}
	dir := t.TempDir()
	proc := filepath.Join(dir, "devices")
	if err := os.WriteFile(proc, []byte(procDevices), 0o600); err != nil {
		t.Fatal(err)
	}
	devRoot := filepath.Join(dir, "dev")
	h := nodeplugin.NewHostChannels(devRoot, proc)
	for range 2 { // the second time, the nodes exist
		major, err := h.Ensure(t.Context(), []int{0, 1, 7})
		if err != nil {
			t.Fatal(err)
		}
		if major != 234 {
			t.Errorf("major %d, want 234 (the character device's)", major)
		}
		for _, n := range []uint32{0, 1, 7} {
			path := filepath.Join(devRoot, "nvidia-caps-imex-channels", "channel"+strconv.Itoa(int(n)))
			if diff := cmp.Diff(node{Char: true, Major: 234, Minor: n, Mode: 0o666}, statNode(t, path)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", path, diff)
			}
		}
	}

	wrong := filepath.Join(devRoot, "nvidia-caps-imex-channels", "channel2")
	if err := unix.Mknod(wrong, unix.S_IFCHR|0o600, int(unix.Mkdev(234, 9))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(devRoot, "nvidia-caps-imex-channels", "channel3"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		channel int
		want    string
	}{
		{2, "channel2 exists but is not the character device 234:2 (mode 020600, device 234:9)"},
		{3, "channel3 exists but is not the character device 234:3 (mode 0100600, device 0:0)"},
	} {
		if _, err := h.Ensure(t.Context(), []int{tc.channel}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ensure(%d): %v, want an error containing %q", tc.channel, err, tc.want)
		}
	}
}

// TestHostChannelsMajor: a /proc/devices without the IMEX channels' character device, or an
// unreadable one, is an error that says what is missing.
func TestHostChannelsMajor(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, proc, want string
	}{
		{"no channels", "Character devices:\n195 nvidia\n\nBlock devices:\n235 nvidia-caps-imex-channels\n", "lists no character device nvidia-caps-imex-channels: is the NVIDIA driver loaded, with IMEX channels?"},
		{"bad major", "Character devices:\nx nvidia-caps-imex-channels\n", `character device nvidia-caps-imex-channels has major "x", not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := filepath.Join(dir, tc.name)
			if err := os.WriteFile(proc, []byte(tc.proc), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := nodeplugin.NewHostChannels(filepath.Join(dir, "dev"), proc).Ensure(t.Context(), []int{0}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Ensure: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := nodeplugin.NewHostChannels(dir, filepath.Join(dir, "missing")).Ensure(t.Context(), []int{0}); err == nil || !strings.Contains(err.Error(), "read the device majors") {
		t.Errorf("Ensure without /proc/devices: %v", err)
	}
}
