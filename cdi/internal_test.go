package cdi

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"tags.cncf.io/container-device-interface/specs-go"
)

func TestCharDeviceMajor(t *testing.T) {
	const devices = "Character devices:\n  1 mem\n195 nvidia-frontend\n237 nvidia-caps\n508 nvidia-uvm\n\nBlock devices:\n237 nvidia-caps-blk\n  9 nvidia-caps\n"
	for _, tc := range []struct {
		name, data, dev string
		want            int64
		err             string
	}{
		{name: "caps", data: devices, dev: "nvidia-caps", want: 237},
		{name: "uvm", data: devices, dev: "nvidia-uvm", want: 508},
		{name: "block section ignored", data: "Block devices:\n  9 nvidia-caps\n", dev: "nvidia-caps", err: `no character device "nvidia-caps"`},
		{name: "prefix is not a match", data: devices, dev: "nvidia", err: `no character device "nvidia"`},
		{name: "bad number", data: "Character devices:\nx nvidia-caps\n", dev: "nvidia-caps", err: `bad major "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := charDeviceMajor([]byte(tc.data), tc.dev)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestFindMinor(t *testing.T) {
	data := []byte("config 1\nmonitor 2\n\ngpu0/gi0/access 3\n  gpu0/gi0/ci0/access   4\ngpu0/gi1/access\t12\ngpu1/gi0/access x\ngpu0/gi2/access -1\n")
	for _, tc := range []struct {
		key  string
		want int64
		ok   bool
		err  string
	}{
		{key: "config", want: 1, ok: true},
		{key: "gpu0/gi0/access", want: 3, ok: true},
		{key: "gpu0/gi0/ci0/access", want: 4, ok: true},
		{key: "gpu0/gi1/access", want: 12, ok: true},
		{key: "gpu0/gi0", ok: false},
		{key: "gpu0/gi0/ci1/access", ok: false},
		{key: "gpu1/gi0/access", err: `line 7: "gpu1/gi0/access x": minor must be a non-negative integer`},
		{key: "gpu0/gi2/access", err: "line 8"},
	} {
		got, ok, err := findMinor(data, tc.key)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("findMinor(%s) err = %v, want %q", tc.key, err, tc.err)
			}
			continue
		}
		if err != nil || ok != tc.ok || got != tc.want {
			t.Errorf("findMinor(%s) = %d, %v, %v; want %d, %v", tc.key, got, ok, err, tc.want, tc.ok)
		}
	}
}

func TestMergeEdits(t *testing.T) {
	base := func() *specs.ContainerEdits {
		mode := os.FileMode(0o666)
		timeout := 5
		return &specs.ContainerEdits{
			Env:         []string{"A=1"},
			DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 195, FileMode: &mode}},
			Mounts:      []*specs.Mount{{HostPath: "/h", ContainerPath: "/c", Options: []string{"ro"}}},
			Hooks:       []*specs.Hook{{HookName: "createContainer", Path: "/hook", Timeout: &timeout}},
		}
	}
	for _, tc := range []struct {
		name string
		src  *specs.ContainerEdits
		want *specs.ContainerEdits
		err  string
	}{
		{name: "nil", src: nil, want: base()},
		{name: "identical duplicates dropped", src: base(), want: base()},
		{
			name: "new entries appended",
			src: &specs.ContainerEdits{
				Env: []string{"B=2"}, AdditionalGIDs: []uint32{44, 44},
				NetDevices: []*specs.LinuxNetDevice{{HostInterfaceName: "ib0", Name: "net1"}},
				IntelRdt:   &specs.IntelRdt{ClosID: "gpu"},
			},
			want: func() *specs.ContainerEdits {
				e := base()
				e.Env = append(e.Env, "B=2")
				e.AdditionalGIDs = []uint32{44}
				e.NetDevices = []*specs.LinuxNetDevice{{HostInterfaceName: "ib0", Name: "net1"}}
				e.IntelRdt = &specs.IntelRdt{ClosID: "gpu"}
				return e
			}(),
		},
		{name: "env conflict", src: &specs.ContainerEdits{Env: []string{"A=2"}}, err: `env A: set to both "A=1" and "A=2"`},
		{name: "env without =", src: &specs.ContainerEdits{Env: []string{"A"}}, err: `env "A": must be KEY=VALUE`},
		{name: "node conflict", src: &specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia0"}}}, err: "device node /dev/nvidia0: given twice"},
		{name: "mount conflict", src: &specs.ContainerEdits{Mounts: []*specs.Mount{{HostPath: "/other", ContainerPath: "/c"}}}, err: "mount at /c: given twice, from /h and from /other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := base()
			err := mergeEdits(dst, tc.src)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, dst); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	// The merged edits are copies: changing the source afterwards changes nothing.
	dst := &specs.ContainerEdits{}
	src := base()
	if err := mergeEdits(dst, src); err != nil {
		t.Fatal(err)
	}
	*src.DeviceNodes[0].FileMode = 0
	src.Mounts[0].Options[0] = "rw"
	*src.Hooks[0].Timeout = 0
	if diff := cmp.Diff(base(), dst); diff != "" {
		t.Errorf("merged edits alias the source (-want +got):\n%s", diff)
	}
}
